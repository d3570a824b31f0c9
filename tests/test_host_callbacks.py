"""Host callbacks inside a jitted JAX step (collect/jax/callbacks.py, rule `host_callback`):
real JAX on this machine's CPU backend, run by `tpuscope run` and in process.

tests/programs/host_callbacks.py leaves a `jax.debug.print` of the loss in its step and scales
the update by a numpy function of the loss (`jax.pure_callback`, 3 ms of numpy on the host).
Each is a card at the line that wrote it, its runs and host time measured; the program's output
is its own;
the reads jax.debug.print makes of its host copies are not the step's host syncs. Bare, the two
cost 0.72 and 3.68 ms a step on this VM against cards of 0.52 and 3.34 ms of CPU
(benchmarks/jax_host_callbacks.py --pairs 3): the cards time the Python the runtime calls, not
the hand-over around it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from tests.conftest import ROOT, marked_line, run_tpuscope
from tpuscope.collect.jax.callbacks import CallbackHook, CallbackSite, callback_rows
from tpuscope.store import Run, RunStore

PROGRAM = ROOT / "tests" / "programs" / "host_callbacks.py"
STEPS = 12


def _line(marker: str) -> str:
    return marked_line(PROGRAM, marker)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    store = tmp_path_factory.mktemp("callbacks")
    bare = subprocess.run(
        [sys.executable, str(PROGRAM), str(STEPS), "both", "3"], capture_output=True, text=True
    )
    run = run_tpuscope(
        "run", "--store", str(store), "python", str(PROGRAM), str(STEPS), "both", "3"
    )
    shown = run_tpuscope("show", "latest", "--store", str(store), "--json")
    return {"bare": bare, "run": run, "report": json.loads(shown.stdout), "store": store}


def test_the_program_prints_and_ends_as_it_does_bare(profiled: dict) -> None:
    bare, run = profiled["bare"], profiled["run"]
    assert run.returncode == bare.returncode == 0, run.stderr
    losses = [line for line in run.stdout.splitlines() if line.startswith("loss ")]
    assert losses == [line for line in bare.stdout.splitlines() if line.startswith("loss ")]
    assert len(losses) == STEPS


def test_each_callback_is_a_card_at_its_line_with_its_host_time(profiled: dict) -> None:
    report = profiled["report"]
    judged = report["summary"]["steps_judged"]
    cards = {f["evidence"]["api"]: f for f in report["findings"] if f["rule"] == "host_callback"}
    assert sorted(cards) == ["jax.debug.print", "jax.pure_callback"]
    pure, printed = cards["jax.pure_callback"], cards["jax.debug.print"]
    assert pure["location"] == _line("PURE_CALLBACK_LINE")
    assert printed["location"] == _line("DEBUG_PRINT_LINE")
    assert pure["evidence"]["function"] == "host_scale"
    for card in (pure, printed):
        evidence = card["evidence"]
        assert evidence["runs_per_step"] == 1.0 and evidence["judged_steps"] == judged
        # on the CPU backend XLA runs a callback inside the step: the step waits for each
        assert evidence["waited"] and evidence["platform"] == "cpu"
        # the cost is its CPU time on the host; the wall time holds that and any wait
        assert card["cost_s"] == pytest.approx(evidence["cpu_s_per_step"] * judged)
        assert 0 < evidence["cpu_s_per_step"] <= evidence["host_s_per_step"]
    assert pure["evidence"]["cpu_s_per_step"] >= 3e-3  # its 3 ms of numpy, timed on the host
    assert pure["severity"] == "high" and pure["fix"].startswith("Write the function in jax.numpy")
    assert "step % 100" in printed["fix"]
    # jax.debug.print formats host copies of its operands: no host sync of the step
    assert [f for f in report["findings"] if f["rule"] == "host_sync"] == []


def test_what_the_device_waits_for_is_told_by_results_and_order() -> None:
    """In process, real JAX: an unordered print or debug callback returns nothing (the device
    does not wait for it on an accelerator); a pure callback returns values, an ordered
    io_callback serializes; the hook leaves JAX as it found it."""
    from jax._src import callback

    original = callback.emit_python_callback
    hook = CallbackHook(lambda: 7, quiet=threading.local()).install()
    logged: list = []
    try:

        @jax.jit
        def step(x):
            jax.debug.print("x {}", x.sum())
            jax.debug.print("x {}", x.sum(), ordered=True)
            y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
            io_callback(logged.append, None, y.sum(), ordered=True)
            return y

        jax.block_until_ready(step(jnp.ones(4)))
    finally:
        hook.uninstall()
    assert callback.emit_python_callback is original
    waits = {(s.api, s.function, s.waits) for s in hook.sites}
    assert waits == {
        ("jax.debug.print", "", False),
        ("jax.debug.print", "", True),
        ("jax.pure_callback", "sin", True),
        ("jax.experimental.io_callback", "append", True),
    }
    assert len(hook.take()) == 4 and hook.take() == []
    jax.block_until_ready(step(jnp.ones(4)))  # compiled with the hook, run after it left
    assert hook.take() == []


def test_runs_at_once_are_one_wait_in_the_step_they_ran_in() -> None:
    """Per (step, site): the runs counted, their host time the union of their intervals (a
    pmapped callback runs once per device at the same time: one wait, not their sum)."""
    site = CallbackSite("jax.pure_callback", "f", "train.py:9", None, True)
    runs = [(5, 100, 50, 40, 0, 0, 0), (5, 120, 50, 45, 0, 0, 0), (5, 400, 10, 5, 0, 0, 0)]
    runs.append((6, 500, 20, 30, 0, 0, 0))
    calls, metrics = callback_rows(runs, [site])
    assert [(r["step"], r["count"]) for r in calls] == [(5, 3), (6, 1)]
    # wall: the union of the intervals; CPU: the threads' sum, at most the wall
    assert [(r["step"], r["total"]) for r in metrics] == [
        (5, 80.0),
        (5, 80.0),
        (6, 20.0),
        (6, 20.0),
    ]
    assert metrics[0]["name"] == "jax.host_callbacks/waited/jax.pure_callback(f) @ train.py:9"
    assert metrics[1]["name"] == "jax.host_callbacks/waited-cpu/jax.pure_callback(f) @ train.py:9"


def test_an_unwaited_print_on_a_tpu_is_no_card(profiled: dict, tmp_path) -> None:
    """The same run's rows as a TPU run's: the pure callback, which the device waits for, is a
    card; the unordered print, which it does not wait for there, is none (its cost on a TPU is
    not measured)."""
    import shutil

    from tpuscope.detect import RunTables
    from tpuscope.detect.host_callback import detect_host_callback
    from tpuscope.store import Run, RunStore

    run = Run(RunStore(profiled["store"]).resolve("latest"))
    copy = tmp_path / run.path.name
    shutil.copytree(run.path, copy)
    tables = RunTables.from_run(Run(copy))
    for process in tables.meta.get("processes") or []:
        process["platform"] = "tpu"
    tables.meta["platform"] = "tpu"
    (card,) = detect_host_callback(tables)
    assert card.evidence.to_dict()["api"] == "jax.pure_callback"
    assert "transfers to and from the host come on top" in card.detail


OPS_PROGRAM = ROOT / "tests" / "programs" / "callback_ops.py"


def test_the_ops_a_callbacks_python_runs_on_its_arguments_are_the_callbacks(tmp_path) -> None:
    """tests/programs/callback_ops.py, purejaxrl's shape: one jitted call, its debug callback
    masking its arguments (jax.Arrays) as ppo.py's DEBUG callback does. Each op its Python runs
    is a dispatch, compiled at each new shape: counted on the callback's card, whose fix leads
    with numpy, and its compiles named as the callback's, not as the step's op-by-op or setup
    run op by op (on a v5e ppo.py's training took 21.9 s, 4.6 s with numpy first: test_tpu_rl)."""
    bare = subprocess.run(
        [sys.executable, str(OPS_PROGRAM), "40"], capture_output=True, text=True, check=True
    )
    store = tmp_path / "store"
    run = run_tpuscope("run", "--store", str(store), "python", str(OPS_PROGRAM), "40")
    assert run.returncode == 0, run.stderr
    assert run.stdout == bare.stdout and "episodic return=" in bare.stdout
    report = json.loads(run_tpuscope("show", "latest", "--store", str(store), "--json").stdout)
    rules = [f["rule"] for f in report["findings"]]
    assert "op_by_op" not in rules  # the step never ran an op outside jit
    (card,) = [f for f in report["findings"] if f["rule"] == "host_callback"]
    evidence = card["evidence"]
    assert card["location"] == f"{OPS_PROGRAM}:{_ops_line('DEBUG_LINE')}"
    assert evidence["runs_per_step"] == 40 and evidence["ops_per_step"] >= 40 * 3
    assert evidence["op_compiles"] > 0 and evidence["ops_s_per_step"] > 0
    assert card["fix"].startswith("Make the callback's arguments numpy arrays")
    assert "JAX ops a step on its arguments outside jit" in card["detail"]
    run_dir = RunStore(store).resolve("latest")
    # the run's one step is its one jitted call, from the call until the device finished it
    # (its callback's runs inside it, on the CPU), not from tpuscope's start to the dispatch
    (step,) = Run(run_dir).table("steps").to_dict("records")
    assert step["wall_ns"] >= evidence["host_s_per_step"] * 1e9
    compiles = Run(run_dir).table("compiles")
    mine = compiles[compiles["callback"].notna()]
    assert len(mine) == evidence["op_compiles"]
    assert set(mine["callback"]) == {f"jax.debug.callback @ {card['location']}"}
    mask = _ops_line("CALLBACK_OPS_LINE")  # the mask, and the loop over its result after it
    assert set(mine["location"]) == {f"{OPS_PROGRAM}:{mask}", f"{OPS_PROGRAM}:{mask + 1}"}
    assert mine["eager"].all() and mine["cause"].str.contains("inside the host callback").all()


def _ops_line(marker: str) -> int:
    for number, text in enumerate(OPS_PROGRAM.read_text().splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(marker)


def test_a_callback_whose_ops_took_jaxs_fast_path_shows_their_compiles() -> None:
    """jnp.mean on a callback's argument compiles once, then runs through JAX's C++ dispatch,
    which no hook sees: a callback with compiles and no counted op in the judged steps says
    its compiles, not "0 JAX ops a step"; one with neither says nothing of ops."""
    from tpuscope.detect.callback_ops import CallbackOps
    from tpuscope.detect.host_callback import _ops_text

    text = _ops_text(CallbackOps(ops=0, ops_s=0.0, compiles=3, compile_s=0.1), judged=28)
    assert text.startswith("Its Python ran JAX ops on its arguments outside jit (3 compiles")
    counted = _ops_text(CallbackOps(ops=56, ops_s=0.028, compiles=3, compile_s=0.1), judged=28)
    assert counted.startswith(
        "Its Python ran 2 JAX ops a step on its arguments outside jit (1.00 ms"
    )
    assert _ops_text(CallbackOps(), judged=28) == ""
