"""`--deep` captures IR frames while graphs are new, not on every step (collect/xla/ir_frames.py).

One real torch_xla loop whose batch changes at steps 20 and 23, run bare and under `tpuscope
run --deep`: the program records, per step, whether torch_xla walked the Python stack for that
step's IR, and its own compile count (the ground truth).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_tpuscope
from tpuscope.collect.xla.ir_frames import AFTER_COMPILE
from tpuscope.store import Run

PROGRAM = ROOT / "tests" / "programs" / "late_shapes.py"
WARMUP = 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("ir_frames")
    bare = subprocess.run(
        [sys.executable, str(PROGRAM), str(tmp / "bare.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PJRT_DEVICE": "CPU"},
        timeout=600,
    )
    assert bare.returncode == 0, bare.stderr
    store = tmp / "store"
    deep = run_tpuscope(
        "run",
        "--store",
        str(store),
        "--name",
        "frames",
        "--quiet",
        "--deep",
        "python",
        str(PROGRAM),
        str(tmp / "deep.json"),
    )
    assert deep.returncode == 0, deep.stderr
    return {
        "bare": json.loads((tmp / "bare.json").read_text()),
        "deep": json.loads((tmp / "deep.json").read_text()),
        "run": Run(next(store.glob("frames-*"))),
    }


def test_frames_on_while_graphs_are_new_and_off_in_the_steady_state(runs) -> None:
    frames = runs["deep"]["frames"]
    quiet = WARMUP + AFTER_COMPILE
    want = [step < quiet or 20 < step < 24 + AFTER_COMPILE for step in range(len(frames))]
    assert (
        frames == want
    )  # off from step 10; the step-20 compile turns them on again, through step 31
    assert not any(runs["bare"]["frames"])  # torch_xla's default: no frames
    off = [
        p["ir_frames_off_steps"]
        for p in runs["run"].meta["processes"]
        if "ir_frames_off_steps" in p
    ]
    assert off == [frames.count(False)]


def test_switching_frames_never_compiles(runs) -> None:
    assert runs["deep"]["compiles"] == runs["bare"]["compiles"] == 4
    assert int(runs["run"].steps["compiles"].sum()) == 4


def test_hlo_names_the_line_of_graphs_compiled_with_frames(runs) -> None:
    """The batch is the contraction dim of `x.T @ x`: the step-20 graph (batch 3) was traced
    without frames, the step-23 one (batch 5) and the warm-up one (batch 4) with them."""
    ops = runs["run"].table("hlo_ops")
    dots = ops[(ops["opcode"] == "dot") & (ops["m"] == 8) & (ops["n"] == 8)]

    def lines(batch: int) -> set[tuple[str, int]]:
        rows = dots[dots["k"] == batch].dropna(subset=["source_file"])
        return {
            (Path(f).name, int(n))
            for f, n in zip(rows["source_file"], rows["source_line"], strict=True)
        }

    assert lines(4) == lines(5) == {(PROGRAM.name, 23)}
    assert (dots["k"] == 3).sum() and lines(3) == set()


def test_frames_the_user_asked_for_stay_on_every_step(tmp_path: Path) -> None:
    """XLA_IR_DEBUG set by the user: tpuscope leaves it, so no switching (launch/env.py)."""
    from tpuscope.collect.xla.ir_frames import ENV_IR_FRAMES
    from tpuscope.launch.env import build_env

    ours = build_env(tmp_path, WARMUP, deep=True, base={})
    theirs = build_env(tmp_path, WARMUP, deep=True, base={"XLA_IR_DEBUG": "1"})
    assert ours.env[ENV_IR_FRAMES] == "compiles" and ours.set_by_tpuscope["XLA_IR_DEBUG"] == "1"
    assert ENV_IR_FRAMES not in theirs.env and "XLA_IR_DEBUG" in theirs.left_to_user
    assert ENV_IR_FRAMES not in build_env(tmp_path, WARMUP, deep=False, base={}).env
    assert ours.env["PT_XLA_DEBUG_LEVEL"] == "1"  # no per-execution analysis under --deep either
