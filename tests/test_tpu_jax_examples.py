"""jax-ml/jax's own examples on a real TPU v5e (JAX 0.10.2), run from a snapshot as a new user
runs them (tests/tpu/programs/jax_examples.py: synthetic MNIST, as the chip has no network),
under `tpuscope run` in the default mode (`tests/tpu/chip_upstream.sh 1`, 6 December;
tests/tpu/runs/jax_*). Their truth was measured bare on the same chip, one epoch traced
between the examples' own epoch prints (bare_trace.py; `chip_upstream.sh 1` and `2`):

- examples/mnist_vae.py: an epoch is one jitted `lax.fori_loop` of 1875 batches of 32; its
  module ran 44.5288 ms in f32 and 44.5316 ms in its bf16 twin (bf16 compute over f32
  parameters): f32 costs nothing here. `evaluate` ran 0.497 ms an epoch.
- examples/differentially_private_sgd.py: per-example gradients by `vmap` of `grad` over a
  stax conv net, f32, batch 256: its step ran 3.3934 ms of device time in f32 and 0.1638 ms in
  its bf16 twin; 3.24 ms of the f32 step is one convolution (the per-example weight gradient,
  an f32 result) at 262x its ideal, which bf16 ran in 28 us.
- examples/mnist_classifier.py: a stax MLP fed a numpy batch of 128 a step: 57.9 us of device
  work in a 0.66 ms step (the device busy 8.5% of the traced epoch): host-bound; its ragged
  last batch (60000 = 468 x 128 + 96) compiles the step once more.
- examples/spmd_mnist_classifier_fromscratch.py (`chip_upstream.sh 4`): explicit sharding over
  a one-chip mesh, a numpy batch placed with `jax.device_put` and a print each step: 0.36-0.38 s
  an epoch of 469 steps bare (0.39-0.40 under tpuscope), host-bound; its step is called inside
  `jax.set_mesh(mesh)` in the loop and once outside it after each epoch (a second compile), and
  one jitted `accuracy` reads the train set and the test set (a second compile).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tpuscope.analyze.chips import chip
from tpuscope.analyze.f32_traffic import arrays
from tpuscope.analyze.f32_waste import bounded_saving
from tpuscope.analyze.nested_ops import self_times
from tpuscope.analyze.op_time import MIN_SHARE, measured_ops, measured_waste
from tpuscope.analyze.slow_ops import slow_ops
from tpuscope.detect.run_analysis import analyze
from tpuscope.parse.hlo import read_shape
from tpuscope.schema import Finding
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"
VAE_DEVICE_S = 44.5288e-3 + 0.497e-3  # the epoch's module and its evaluate, bare
DPSGD_F32_LOST_S = 3.3934e-3 - 0.1638e-3  # the f32 step against its bf16 twin's, bare


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Finding]]:
    """Each committed run analysed afresh, as `tpuscope show` reads it."""
    root = tmp_path_factory.mktemp("jax_examples")
    found = {}
    for name in ("jax_vae", "jax_dpsgd", "jax_mnist", "jax_spmd"):
        shutil.copytree(RUNS / name, root / name)
        found[name] = analyze(Run(root / name)).findings
    return found


def _cards(found: list[Finding]) -> dict[str, Finding]:
    return {
        str(f.evidence.to_dict().get("kind")): f for f in found if f.rule == "tensorcore_underuse"
    }


def test_a_loop_s_ops_count_once_in_the_device_step() -> None:
    """A TPU trace times an XLA while loop as one op spanning its body's ops, which it also
    times: summed as they came, the VAE's traced epochs held 80.1 ms of ops for 45.0 ms of
    module time. Each op's own time is its duration less the ops nested in it."""
    run = Run(RUNS / "jax_vae")
    per, steps = measured_ops(run.table("trace_events"), [3, 4, 5, 6, 7])
    assert steps == 5
    assert per["time_s"].sum() == pytest.approx(VAE_DEVICE_S, rel=0.01)


def test_f32_that_bf16_does_not_speed_up_gets_no_card(findings: dict) -> None:
    """The VAE's ops are 0.1-4 us each over weights XLA keeps on chip: bf16 ran its epoch in
    the same 44.53 ms. The f32 card had said [high] 9.25 ms a step; its matmuls are still
    found as f32, and what they lose is now under a card's share. 8 of its f32 ops (15.1 ms of
    the 44.87 ms epoch) hold the threefry hashing of its sampled noise: left out, and named."""
    assert "f32" not in _cards(findings["jax_vae"])
    run = Run(RUNS / "jax_vae")
    wastes, figures = measured_waste(
        run.table("trace_events"), run.table("hlo_ops"), chip("v5e"), [3, 4, 5, 6, 7]
    )
    (f32,) = [w for w in wastes if w.kind == "f32"]
    assert f32.info["count"] == 15 and f32.info["random_bits_ops"] == 8
    # its noise's hashing runs in a few us a batch, bound by their fixed cost: no card either
    assert "random_bits" not in _cards(findings["jax_vae"])
    assert not [w for w in wastes if w.kind == "random_bits"]
    assert f32.info["random_bits_s"] == pytest.approx(0.0151, rel=0.01)
    assert f32.lost_s < MIN_SHARE * figures["device_s_per_step"]


def test_an_op_s_own_time_leaves_out_what_is_nested_in_it() -> None:
    """Two levels of nesting, equal starts (the longer holds the shorter), a partial overlap
    (nothing nested) and a second device whose events do not nest with the first's."""
    events = pd.DataFrame(
        {
            "plane": ["a", "a", "a", "a", "a", "b", "b"],
            "start_ns": [0, 0, 10, 20, 200, 5, 50],
            "dur_ns": [100, 40, 10, 60, 30, 100, 10],
        }
    )
    # a: [0,100) holds [0,40) (which holds [10,20)) and [20,80) partly past 40: held by the loop
    assert self_times(events).tolist() == [0, 30, 10, 60, 30, 90, 10]


def test_an_f32_saving_is_bounded_by_what_the_op_s_time_shows() -> None:
    """Near its ideal an op saves its time less its bf16 ideal (1.2 ms at a 1 ms byte ideal,
    0.5 ms in bf16: 0.7 ms); at 10x its ideal no more than 2.5x what the ideal loses; under
    1 us a run nothing; at the ridge (FLOPs and bytes 1 ms each, the smooth maximum 1.12 ms)
    halving the bytes saves what the op's time shows over its bf16 ideal (1.00 ms), up to 2.5x
    what the smooth maximum loses."""
    ops = pd.DataFrame({"time_s": [1.2e-3, 10e-3, 0.5e-6, 1.3e-3], "runs_per_step": [1.0] * 4})
    flops = (np.array([0, 0, 0, 1e-3]), np.array([0, 0, 0, 1e-3]))
    bytes_ = (np.array([1e-3, 1e-3, 0.25e-6, 1e-3]), np.array([0.5e-3, 0.5e-3, 0.125e-6, 0.5e-3]))
    saved = bounded_saving(ops, flops, bytes_)
    ridge_now, ridge_then = 2 ** (1 / 6) * 1e-3, (1 + 0.5**6) ** (1 / 6) * 1e-3  # 1.12, 1.00 ms
    ridge = min(1.3e-3 - ridge_then, 2.5 * (ridge_now - ridge_then))
    assert saved == pytest.approx([0.7e-3, 1.25e-3, 0.0, ridge])
    assert saved[3] > 0  # the larger of FLOPs and bytes alone saw no loss


def test_an_op_the_hlo_does_not_name_or_count_is_not_judged_off_peak() -> None:
    """A trace's op with no row in its HLO, or without XLA's FLOPs, has no ideal to judge."""
    per = pd.DataFrame(
        {
            "hlo_module": ["m", "m"],
            "hlo_op": ["unknown.1", "fusion.2"],
            "time_s": [5e-3, 5e-3],
            "runs_per_step": [1.0, 1.0],
            "flops": [1e6, np.nan],
            "bytes": [1e3, 1e3],
        }
    )
    top = pd.DataFrame(
        {
            "module": ["m"],
            "name": ["fusion.2"],
            "opcode": ["fusion"],
            "fusion": [None],
            "shape": ["f32[8]"],
        }
    )
    assert slow_ops(per, top, chip("v5e")).empty


def test_an_op_far_off_the_peak_gets_its_measured_loss(findings: dict) -> None:
    """DP-SGD: one convolution took 3.24 ms of a 3.39 ms step at 262x its ideal. The card
    names it and its loss against its ideal, within 10% of what bf16 saved bare; the f32 card,
    which had said 1.38 ms (scaling the op's time by its halved bytes), is not raised on it."""
    cards = _cards(findings["jax_dpsgd"])
    assert set(cards) == {"off_peak"}
    card = cards["off_peak"]
    lost = card.evidence.to_dict()["lost_s_per_step"]
    assert lost == pytest.approx(DPSGD_F32_LOST_S, rel=0.10)
    assert "convolution f32[256,4,4,16,32] (operands bf16)" in card.detail
    assert card.title.startswith("2 op(s) far off the chip's peak (262x")
    assert card.evidence.to_dict()["cost_figure"].startswith("measured")
    assert card.location is not None
    assert card.location.endswith("differentially_private_sgd.py:140")  # clipped_grad's norm
    (recompile,) = [f for f in findings["jax_dpsgd"] if f.rule == "recompile"]
    assert recompile.location is not None
    assert recompile.location.endswith("differentially_private_sgd.py:228")


def test_the_mnist_classifier_is_host_bound_with_its_ragged_batch(findings: dict) -> None:
    """Host-bound (57.9 us of device work in a 0.6 ms step): the f32 matmuls' 2 us a step is
    device time the step would not gain while the host bounds it, said so, at no cost (before:
    "2.0 us lost per step", [low], its cost counted)."""
    found = findings["jax_mnist"]
    (idle,) = [f for f in found if f.title.startswith("device idle")]
    assert idle.severity == "high" and "host-bound" in idle.title
    f32 = _cards(found)["f32"]
    assert f32.cost_s == 0.0 and f32.severity == "low"
    assert f32.title.endswith(
        "of device time per step (measured): none of the host-bound step's time"
    )
    (recompile,) = [f for f in found if f.rule == "recompile"]
    assert recompile.location is not None
    assert recompile.location.endswith("mnist_classifier.py:89")
    assert "f32[128,784] -> f32[96,784]" in recompile.detail
    assert "off_peak" not in _cards(found)


def test_the_spmd_example_s_two_recompiles_get_their_own_fixes(findings: dict) -> None:
    """On the chip: the mesh context's recompile gets the mesh fix, the sharded sizes'
    (`f32[60000@batch,784] -> f32[10000@batch,784]`) a shape fix, where both had said "set
    it once" and "the same dtype"; the step is host-bound at its data stream."""
    found = findings["jax_spmd"]
    fixes = {str(f.location).rsplit(":", 1)[-1]: f.fix for f in found if f.rule == "recompile"}
    assert set(fixes) == {"137", "145"}
    assert fixes["145"].startswith("train_step was called under one mesh context")
    assert fixes["137"].startswith("Give batch[0] the same shape on every call of accuracy")
    (idle,) = [f for f in found if f.title.startswith("device idle")]
    assert idle.location is not None and idle.location.endswith("fromscratch.py:96")
    assert "data_stream" in idle.detail


def test_a_tuple_shape_keeps_its_numbered_elements() -> None:
    """XLA prints every fifth element of a tuple after a `/*index=N*/` comment; the shape
    reader dropped those, and with them the VAE's 188 MB images from its loop's root tuple, so
    the f32 card took the images sliced each iteration for activations bf16 would halve."""
    text = "(f32[784]{0:T(1024)S(1)}, u32[2]{0:T(128)S(1)}, /*index=30*/f32[60000,784]{1,0:T(8,128)}, u32[])"
    shape, used = read_shape(text)
    assert used == len(text)
    assert [str(e) for e in shape.elements] == ["f32[784]", "u32[2]", "f32[60000,784]", "u32[]"]
    hlo = Run(RUNS / "jax_vae").table("hlo_ops")
    roots = hlo[(hlo["opcode"] == "tuple") & hlo["computation"].astype(str).str.startswith("wide")]
    longest = max(roots["shape"], key=len)
    assert ("f32[60000,784]", 188160000) in arrays(longest)
    assert len(read_shape(longest)[0].elements) == 54
