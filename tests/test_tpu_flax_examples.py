"""Flax's NNX toy examples on a real TPU v5e (JAX 0.10.2, flax 0.12.8): google/flax
`examples/nnx_toy_examples/03_train_state.py` and `07_array_leaves.py`, run from a flax
snapshot with their loop timed (not committed; `tests/tpu/chip_verify.sh 2`, 6 December)
under `tpuscope run` in the default mode (tests/tpu/runs/nnx_03_train_state,
nnx_07_array_leaves). Bare on the same chip their loops took 0.5940 and 1.0096 ms a step (the
first compile included) for 2-3 us of device work: host-bound. The host's traced time went to
the dispatch of the jitted step and (07) NNX's graph traversal, and a little to the examples'
`dataset` generator (47-127 us a step), the only part with a line of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"


@pytest.mark.parametrize(
    "name, call_line, nnx_fix",
    [
        ("nnx_03_train_state", "03_train_state.py:110", False),
        ("nnx_07_array_leaves", "07_array_leaves.py:87", True),
    ],
)
def test_the_host_bound_card_stands_at_the_step_s_call(
    name: str, call_line: str, nnx_fix: bool, tmp_path: Path
) -> None:
    """The card stands where most of the host's time went: the step's call (`state =
    train_step(state, batch)` in the timed copy), not the `dataset` generator's def line."""
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    (card,) = analyze(Run(run_dir)).findings
    assert card.title == "device idle 100% of the step: the step is host-bound"
    assert card.location is not None and card.location.endswith(call_line)
    assert "dataset (" in card.detail  # the generator's share is still named
    assert card.fix.startswith("Flax NNX: `nnx.jit`") is nnx_fix
