"""Live alerts (tpuscope/launch/alerts/): real torch_xla and JAX programs under `tpuscope run`, and
the rate limit on a fake clock.

The programs (tests/programs/alerts.py, alerts_jax.py) print MARK after the step with the
problem and keep stepping for a few seconds before their last line, LAST; stdout and stderr
share one pipe, so the order of lines is the order they were written in.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, tpuscope_cmd
from tpuscope.launch.alerts import Again, AlertJudge, AlertPrinter, Problem

PROGRAMS = ROOT / "tests" / "programs"
XLA, JAX = PROGRAMS / "alerts.py", PROGRAMS / "alerts_jax.py"
ALERT = re.compile(
    r"^tpuscope: (?:step \d+: )?(recompile of|new CPU fallback|in the last|\d+ more)"
)

pytestmark = pytest.mark.slow


def run(
    store: Path, name: str, program: Path, *args: str, options: tuple[str, ...] = ()
) -> tuple[list[str], Path]:
    """`tpuscope run` with stdout and stderr in one pipe: (its lines in order, the run folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    proc = subprocess.run(
        tpuscope_cmd(
            "run", "--store", str(store), "--name", name, *options, "python", str(program), *args
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout.splitlines(), next(store.glob(f"{name}-*"))


def alerts(lines: list[str]) -> list[str]:
    return [line for line in lines if ALERT.match(line)]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "analysis.json").read_text())


def findings(run_dir: Path) -> list[dict]:
    from tpuscope.store import Run

    return Run(run_dir).findings.to_dict("records")


def recompile_cards(run_dir: Path) -> list[dict]:
    """The run's `recompile` cards. One short batch in the middle of the loop is a bounded set
    (2 graphs, each compiled once, then the cache): the report's low note, and no alert."""
    return [f for f in findings(run_dir) if f["rule"] == "recompile"]


# -- real programs ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [(), ("--deep",)], ids=["default", "deep"])
def test_a_one_off_short_batch_is_the_reports_bounded_note_and_no_alert(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """The alerts judge by the report's verdicts: the short batch's graph waits while its family
    may still be a bounded set, and once the loop ran on from the cache it is one: a low note in
    the report, nothing said while the program runs (in the default mode and with --deep)."""
    lines, run_dir = run(tmp_path, "recompile", XLA, "recompile", "6", options=options)
    [card] = recompile_cards(run_dir)
    assert json.loads(card["evidence"])["verdict"] == "bounded" and card["severity"] == "low", card
    assert alerts(lines) == []
    assert summary(run_dir)["recompiles"] == 0


def test_a_storm_of_50_recompiles_is_a_few_lines_that_count_them_all(tmp_path: Path) -> None:
    lines, run_dir = run(tmp_path, "storm", XLA, "storm", "50", "3")
    said = alerts(lines)
    assert 2 <= len(said) <= 3, said
    assert said[0].startswith(
        f"tpuscope: step 1: recompile of the graph from alerts.py:{_line(XLA, 'storm-sync')} ("
    )
    counted = 1 + sum(int(n) for n in re.findall(r"(\d+) more recompiles", " ".join(said[1:])))
    assert counted == summary(run_dir)["recompiles"] == 50
    # the summing-up lines cover steps 2-50 between them (one line, or two when a window closed
    # mid-storm: the first alert waits until the family outgrew a bounded set)
    ranges = [tuple(map(int, r)) for r in re.findall(r"\(steps (\d+)-(\d+);", " ".join(said[1:]))]
    assert ranges[0][0] == 2 and ranges[-1][1] == 50 and said[-1].endswith("; 50 in all)"), said
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False)), said


def test_a_cpu_fallback_is_said_once_at_the_users_line(tmp_path: Path) -> None:
    lines, run_dir = run(tmp_path, "fallback", XLA, "fallback", "8")
    [said] = alerts(lines)
    [card] = [f for f in findings(run_dir) if f["rule"] == "cpu_fallback"]
    line = _line(XLA, "ticks[ticks > 7]")
    assert (
        said
        == f"tpuscope: step {card['step_runs'][0][0]}: new CPU fallback aten::nonzero at alerts.py:{line} (1 call per step)"
    )
    assert card["location"].endswith(f"alerts.py:{line}")
    assert lines.index(said) < lines.index("LAST")


def test_a_clean_program_with_warm_up_compiles_says_nothing(tmp_path: Path) -> None:
    lines, run_dir = run(tmp_path, "clean", XLA, "clean", "3")
    assert alerts(lines) == []
    assert not any(line.startswith("tpuscope: step") for line in lines)
    facts = summary(run_dir)
    # step 0, step 1 (SGD creates its momentum), the eval after the loop: all first compiles
    assert facts["compiles"] >= 3 and facts["recompiles"] == 0


@pytest.mark.parametrize(
    "options", [("--alerts", "off"), ("--quiet",)], ids=["alerts-off", "quiet"]
)
def test_alerts_off_and_quiet_say_nothing(tmp_path: Path, options: tuple[str, ...]) -> None:
    lines, run_dir = run(tmp_path, "off", XLA, "recompile", "1", options=options)
    assert len(recompile_cards(run_dir)) == 1
    assert alerts(lines) == []


def test_quiet_with_alerts_on_says_only_the_alerts(tmp_path: Path) -> None:
    lines, _ = run(
        tmp_path, "quiet-on", XLA, "storm", "12", "1", options=("--quiet", "--alerts", "on")
    )
    assert [line for line in lines if line.startswith("tpuscope:")] == alerts(lines)
    assert alerts(lines) and alerts(lines)[0].startswith("tpuscope: step 1: recompile of"), lines


def test_a_jax_recompile_is_said_while_the_program_runs(tmp_path: Path) -> None:
    lines, run_dir = run(tmp_path, "jax", JAX, "recompile", "8")
    [said] = alerts(lines)
    line = _line(JAX, "params = train_step(params, batches[8 if")
    assert said.startswith(f"tpuscope: step 5: recompile of train_step at alerts_jax.py:{line} (")
    assert said.endswith(
        "): arg batch['x']: f32[32,16] -> f32[8,16]; arg batch['y']: f32[32,4] -> f32[8,4]"
    )
    assert lines.index("MARK") < lines.index(said) < lines.index("LAST")
    assert summary(run_dir)["recompiles"] == 1


def test_a_clean_jax_program_says_nothing(tmp_path: Path) -> None:
    lines, run_dir = run(tmp_path, "jax-clean", JAX, "clean", "2")
    assert alerts(lines) == []
    assert summary(run_dir)["compiles"] >= 1 and summary(run_dir)["recompiles"] == 0


def _line(program: Path, text: str) -> int:
    return next(n for n, line in enumerate(program.read_text().splitlines(), 1) if text in line)


# -- the judge on hand-built rows ----------------------------------------------------------------


def _compile(index: int, step: int, location: str, inputs: int, pid: int = 1) -> dict:
    return {
        "host": "h",
        "pid": pid,
        "step": step,
        "index": index,
        "time_ns": index,
        "duration_ns": 10**9,
        "graph_hash": f"g{index}",
        "cause": "user torch_xla.sync",
        "location": location,
        "frames": [],
        "num_inputs": inputs,
        "input_shapes": None,
        "output_shapes": None,
        "input_gb": None,
    }


META = {"processes": [{"host": "h", "pid": 1, "rank": 0, "backend": "torch_xla"}], "warmup": 2}


def test_the_judge_says_a_recompile_once_per_site_and_counts_the_rest() -> None:
    judge = AlertJudge()
    rows = [
        _compile(0, 0, "/u/train.py:9", 3),
        _compile(1, 1, "/u/train.py:40", 5),
        _compile(2, 2, "/u/train.py:40", 9),
    ]  # three families: first compiles only
    assert judge.update({"compiles": pd.DataFrame(rows)}, META) == ([], [])
    # a new graph of a family that ran: it may still be a bounded set (buckets), so it waits ...
    assert judge.update(
        {"compiles": pd.DataFrame([_compile(3, 7, "/u/train.py:40", 9)])}, META
    ) == ([], [])
    # ... until the family can no longer be one: the same graph compiled again (evicted)
    problems, again = judge.update(
        {"compiles": pd.DataFrame([_compile(4, 8, "/u/train.py:40", 9) | {"graph_hash": "g3"}])},
        META,
    )
    assert [p.line for p in problems] == ["step 7: recompile of the graph from train.py:40 (1.0 s)"]
    assert [(a.count, a.steps) for a in again] == [(1, [8])]
    more = pd.DataFrame([_compile(5, 9, "/u/train.py:40", 9), _compile(6, 10, "/u/train.py:40", 9)])
    problems, again = judge.update({"compiles": more}, META)
    assert problems == [] and [(a.key, a.count, a.steps) for a in again] == [
        ("/u/train.py:40", 2, [9, 10])
    ]


def test_a_bounded_set_is_never_said_and_a_set_that_outgrows_it_is() -> None:
    """The alert's verdict is the report's: two graphs of a family, each compiled once, then
    steps from the cache (buckets) are a bounded note; a family whose new graphs outgrow a
    bounded set (more than MAX_BOUNDED) is said as soon as it does."""
    steps = lambda *n: pd.DataFrame({"host": "h", "pid": 1, "step": list(n), "boundary": "sync"})  # noqa: E731
    judge = AlertJudge()
    rows = [_compile(0, 0, "/u/train.py:40", 9), _compile(1, 1, "/u/train.py:40", 9)]
    assert judge.update({"compiles": pd.DataFrame(rows), "steps": steps(0, 1)}, META) == ([], [])
    assert judge.update({"steps": steps(2, 3, 4)}, META) == ([], [])  # bounded now
    assert judge.update({}, META, ended=True) == ([], [])
    storm = AlertJudge()
    rows = [_compile(i, i, "/u/train.py:40", 9) for i in range(10)]
    problems, again = storm.update(
        {"compiles": pd.DataFrame(rows), "steps": steps(*range(10))}, META
    )
    assert [p.line for p in problems] == ["step 1: recompile of the graph from train.py:40 (1.0 s)"]
    assert [a.count for a in again] == [8]


def test_ranks_are_named_and_a_site_is_said_once_for_all_of_them() -> None:
    meta = {
        "processes": [
            {"host": "h", "pid": pid, "rank": rank, "backend": "torch_xla"}
            for pid, rank in ((1, 0), (2, 1))
        ]
    }
    rows = [
        _compile(i, step, "/u/train.py:40", 9, pid=pid)
        for i, (step, pid) in enumerate([(0, 1), (0, 2), (3, 2), (3, 1)])
    ]
    problems, again = AlertJudge().update({"compiles": pd.DataFrame(rows)}, meta, ended=True)
    assert [p.line for p in problems] == [
        "rank 1, step 3: recompile of the graph from train.py:40 (1.0 s)"
    ]
    assert [(a.count, a.steps) for a in again] == [(1, [3])]


def test_the_judge_waits_for_the_process_to_name_its_backend() -> None:
    judge = AlertJudge()
    rows = pd.DataFrame([_compile(0, 0, "/u/train.py:40", 9), _compile(1, 1, "/u/train.py:40", 9)])
    assert judge.update({"compiles": rows}, {"processes": [{"host": "h", "pid": 1}]}) == ([], [])
    problems, _ = judge.update({}, META, ended=True)
    assert [p.key for p in problems] == ["/u/train.py:40"]


def test_the_judge_waits_for_a_fallbacks_call_site_then_gives_up_waiting() -> None:
    judge = AlertJudge()
    steps = lambda *n: pd.DataFrame({"host": "h", "pid": 1, "step": list(n)})  # noqa: E731
    unlocated = pd.DataFrame(
        [
            {"host": "h", "pid": 1, "step": 3, "op": "aten::nonzero", "count": 2, "location": None},
            {
                "host": "h",
                "pid": 1,
                "step": 3,
                "op": "aten::_local_scalar_dense",
                "count": 1,
                "location": None,
            },
        ]
    )
    assert judge.update({"fallbacks": unlocated, "steps": steps(3)}, META) == ([], [])
    located = unlocated.iloc[:1].assign(step=4, location="/u/model.py:88")
    problems, _ = judge.update({"fallbacks": located, "steps": steps(4)}, META)
    assert [p.line for p in problems] == [
        "step 3: new CPU fallback aten::nonzero at model.py:88 (2 calls per step)"
    ]
    other = unlocated.iloc[:1].assign(op="aten::_unique2", step=5)
    assert judge.update({"fallbacks": other, "steps": steps(5, 6, 7)}, META) == ([], [])
    problems, _ = judge.update(
        {"steps": steps(8)}, META
    )  # traced steps passed: said without a line
    assert [p.line for p in problems] == [
        "step 5: new CPU fallback aten::_unique2 (0.5 calls per step)"
    ]


# -- the printer on a fake clock ----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _problem(key: str) -> Problem:
    return Problem(
        "recompile",
        key,
        f"step 1: recompile of the graph from {key} (1.0 s)",
        f"the graph from {key}",
    )


def test_a_storm_prints_one_line_then_a_count_at_doubling_intervals() -> None:
    out, clock = io.StringIO(), Clock()
    printer = AlertPrinter(out, clock, repeat_s=10, max_repeat_s=40)
    printer.new(_problem("a.py:1"))
    for second in range(1, 200):  # one more recompile every second for 200 s
        clock.now = float(second)
        printer.again(Again("a.py:1", 1, [second]))
        printer.tick()
    printer.tick(final=True)
    lines = out.getvalue().splitlines()
    assert lines[0] == "tpuscope: step 1: recompile of the graph from a.py:1 (1.0 s)"
    assert (
        lines[1]
        == "tpuscope: in the last 10 s: 10 more recompiles of the graph from a.py:1 (steps 1-10; 11 in all)"
    )
    assert lines[2].startswith("tpuscope: in the last 20 s: 20 more recompiles")
    assert lines[3].startswith("tpuscope: in the last 40 s: 40 more recompiles")
    assert lines[4].startswith(
        "tpuscope: in the last 40 s: 40 more recompiles"
    )  # at most every 40 s
    total = 1 + sum(int(re.search(r"(\d+) more", line)[1]) for line in lines[1:])
    assert total == 200 and lines[-1].endswith("200 in all)")
    assert len(lines) == 8


def test_new_problems_past_the_quota_are_counted_not_printed() -> None:
    out, clock = io.StringIO(), Clock()
    printer = AlertPrinter(out, clock, repeat_s=10, max_new=2)
    for n in range(5):
        printer.new(_problem(f"f{n}.py:1"))
    printer.tick(final=True)
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        "tpuscope: step 1: recompile of the graph from f0.py:1 (1.0 s)",
        "tpuscope: step 1: recompile of the graph from f1.py:1 (1.0 s)",
    ]
    assert lines[2] == (
        "tpuscope: 3 more new problems (the graph from f2.py:1, the graph from f3.py:1, "
        "the graph from f4.py:1; the report lists them)"
    )
    assert len(lines) == 3


def test_nothing_counted_prints_nothing() -> None:
    out = io.StringIO()
    printer = AlertPrinter(out, Clock())
    printer.tick()
    printer.tick(final=True)
    assert out.getvalue() == ""


@pytest.mark.parametrize("asked", [False, True], ids=["default", "alerts=True"])
def test_profile_says_nothing_unless_asked(tmp_path: Path, asked: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"} | {"PJRT_DEVICE": "CPU"}
    proc = subprocess.run(
        [
            sys.executable,
            str(PROGRAMS / "profile_alerts.py"),
            str(tmp_path),
            *(["alerts"] if asked else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    lines = proc.stdout.splitlines()
    [run_dir] = tmp_path.iterdir()
    assert len(recompile_cards(run_dir)) == 1
    said = alerts(lines)
    if not asked:
        assert said == []
        return
    line = _line(PROGRAMS / "profile_alerts.py", "profile: sync")
    assert said[0].startswith(
        f"tpuscope: step 2: recompile of the graph from profile_alerts.py:{line} ("
    ), lines
    assert lines.index(said[0]) < lines.index("LAST")
