"""Flax NNX's MNIST tutorial CNN on a real TPU v5e (JAX 0.10.2): tests/tpu/programs/nnx_cnn.py
under `tpuscope run` in the default mode (tests/tpu/runs/nnx_cnn, nnx_cnn_cached). Bare on the
same chip its `nnx.jit` step took 2.2427 ms a step and 1.2445 ms called through
`nnx.cached_partial` (Flax's "Performance considerations" guide), for 65 us of device work a
step: host-bound either way, and a millisecond a step of it in nnx.jit's traversal of the
Modules' graph at each call, which the trace's Python tracer shows (flax/nnx/graphlib.py's
`_graph_flatten` and `_graph_unflatten`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"
NAMES = {
    "nnx_cnn": "nnx_cnn-20261206-035446-8a09",
    "nnx_cnn_cached": "nnx_cnn_cached-20261206-035521-a2bc",
}


def _idle_card(name: str, tmp_path: Path):
    run_dir = tmp_path / NAMES[name]
    shutil.copytree(RUNS / name, run_dir)
    (card,) = [
        f
        for f in analyze(Run(run_dir)).findings
        if f.rule == "tensorcore_underuse" and f.title.startswith("device idle")
    ]
    return card


def test_nnx_jit_s_graph_traversal_is_named_with_its_fix(tmp_path: Path) -> None:
    """Through nnx.jit: host-bound (device idle 98%), the host's traced time led by NNX's
    graph flatten and unflatten, and the fix leads with `nnx.cached_partial`, which saved 1.0
    ms of the 2.24 ms step bare. The card stands at the step's call (the loop is module-level
    code, no function of the program's holds it)."""
    card = _idle_card("nnx_cnn", tmp_path)
    assert card.title == "device idle 98% of the step: the step is host-bound"
    assert "flax.nnx's graph flatten and unflatten (nnx.jit splitting and merging the Modules)" in (
        card.detail
    )
    assert card.fix.startswith("Flax NNX: `nnx.jit` flattens and unflattens")
    assert "nnx.cached_partial(train_step, model, optimizer, ...)" in card.fix
    assert card.location is not None and card.location.endswith("nnx_cnn.py:79")


def test_a_cached_nnx_step_is_host_bound_without_the_graph_s_share(tmp_path: Path) -> None:
    """Through nnx.cached_partial: still host-bound (a batch of 32 gives the device 65 us a
    step against 1.24 ms of host), its traced host time the dispatch alone, and the generic
    advice (raise the batch)."""
    card = _idle_card("nnx_cnn_cached", tmp_path)
    assert card.title == "device idle 95% of the step: the step is host-bound"
    assert "flax.nnx's graph" not in card.detail
    assert card.fix.startswith("Keep the device fed")
