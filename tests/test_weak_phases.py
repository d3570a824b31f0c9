"""A loop whose step compiles three ways (tests/programs/weak_phases.py, diffrax's neural ODE
example's shapes in plain JAX), run by `tpuscope run` on this machine's CPU backend:

- a learnt scale made as `jnp.array(1.0)` is weakly typed; the first update returns it strongly
  typed, so the step compiles again at step 1: a card of its own, whose fix gives the scale its
  dtype (the `strong` twin, so made, has no such compile);
- the second phase's longer series compile the step once more: a card that says what padding
  would cost a phase changed on purpose;
- the jitted loss evaluates the fitted model once after the loop, at another length: a compile
  after the loop, said to be once, not "still recurring" at "1000 per 1,000 steps".
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import tpuscope
from tests.conftest import ROOT, marked_line, run_tpuscope
from tpuscope.detect.tables import RunTables
from tpuscope.detect.traced_segment import traced_segment

PROGRAM = ROOT / "tests" / "programs" / "weak_phases.py"
STEPS = 20  # a phase


def _line(marker: str) -> str:
    return marked_line(PROGRAM, marker)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for twin in ("weak", "strong"):
        store = tmp_path_factory.mktemp(twin)
        args = [str(PROGRAM), str(STEPS)] + (["strong"] if twin == "strong" else [])
        bare = subprocess.run([sys.executable, *args], capture_output=True, text=True)
        run = run_tpuscope("run", "--store", str(store), "python", *args)
        shown = run_tpuscope("show", "latest", "--store", str(store), "--json")
        out[twin] = {"bare": bare, "run": run, "report": json.loads(shown.stdout), "store": store}
    return out


def _recompiles(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == "recompile"]


def test_the_program_prints_and_ends_as_it_does_bare(runs: dict) -> None:
    for twin in runs.values():
        assert twin["run"].returncode == twin["bare"].returncode == 0, twin["run"].stderr
        assert twin["run"].stdout == twin["bare"].stdout


def test_a_weak_type_flip_is_its_own_card_with_its_fix(runs: dict) -> None:
    cards = _recompiles(runs["weak"]["report"])
    (weak,) = [c for c in cards if "changed its weak type" in c["title"]]
    assert "params['scale'] changed its weak type" in weak["title"]
    assert weak["step_runs"] == [[1, 1]] and weak["location"] == _line("STEP_LINE")
    assert "jnp.array(1.0, dtype=jnp.float32)" in weak["fix"]
    assert "pad" not in weak["fix"] and "shape_churn" not in weak["evidence"]["facets"]
    assert not [c for c in _recompiles(runs["strong"]["report"]) if "weak type" in c["title"]]


def test_a_second_phase_at_a_new_length_says_what_padding_would_cost(runs: dict) -> None:
    (phase,) = [
        c
        for c in _recompiles(runs["weak"]["report"])
        if "make_step" in c["title"] and "2 sizes" in c["title"]
    ]
    assert phase["step_runs"] == [[STEPS, STEPS]] and "(16, 160)" in phase["detail"]
    assert "If the size changed on purpose" in phase["fix"]
    assert "one-off so far" in phase["detail"]


def test_a_compile_after_the_loop_is_once_not_recurring(runs: dict) -> None:
    for twin in runs.values():
        (after,) = [c for c in _recompiles(twin["report"]) if "loss_of" in c["title"]]
        assert after["severity"] == "low" and after["location"] == _line("AFTER_LINE")
        assert "made after the loop's last step" in after["detail"]
        assert "recurring" not in after["detail"] and "per 1,000 steps" not in after["detail"]
        assert "If the size changed on purpose" not in after["fix"]


def test_a_trace_speaks_for_the_steps_between_the_recompiles_around_it(runs: dict) -> None:
    """Steps 3-7 traced (as the automatic window takes them) ran the graph compiled again at
    step 1 until the second phase's recompile at step 20: the held-out check's first compile at
    step 10 is no new graph of the step, and does not end them."""
    tables = RunTables.from_run(tpuscope.load_run("latest", store=str(runs["weak"]["store"])))
    segment = traced_segment(tables, pd.Series([3, 4, 5, 6, 7]))
    assert list(segment.judged["step"]) == list(range(2, STEPS))
    assert segment.after is not None and int(segment.after["step"]) == STEPS
    assert "steps 2-19; from step 20 the loop ran make_step at new inputs" in segment.text(
        len(tables.judged)
    )
