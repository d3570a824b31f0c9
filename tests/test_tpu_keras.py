"""Keras 3 on JAX on a real TPU v5e (JAX 0.10.2, Keras 3 from the machine's index), under
`tpuscope run` in the default mode (`tests/tpu/chip_keras.sh 1`, 7 December), with the twins
that are their truth run on the same chip:

- keras_xception_f32, keras_xception_bf16: tests/tpu/programs/keras_xception.py, keras-io's
  image classifier from scratch (its small Xception of separable convolutions, batches of 128
  180x180 images, `fit` on numpy arrays, 1586 samples: each epoch ends on a batch of 50) under
  Keras's default float32 policy, as the example runs, and under mixed_bfloat16. Their traced
  device steps: 96.3 ms in float32, 58.8 ms in mixed_bfloat16 (37.5 ms of device time a step
  lost to float32). Bare, the programs' own epoch timing gave 101.47 and 68.22 ms a step
  (33.25 ms), and 94.31 and 58.49 under tpuscope: each step also moves a 50 MB f32 batch from
  numpy, and the bf16 run's device idled 5-35 ms in 3 of its 5 traced steps waiting for it.
  The committed tables leave out the host events named `Transpose` (1.48 million a run, libtpu
  laying out each batch for the device; no rule reads them).
- keras_mnist: tests/tpu/programs/keras_mnist.py, keras-io's MNIST convnet (`chip_keras.sh 6`,
  session 38) with its progress bar: 1.6159 ms a batch bare by its own epoch timing, 1.0631 ms
  with `steps_per_execution=32` (Keras's way to run several batches a call); under tpuscope
  1.7029 ms, p50 1.51 ms, the device busy 91.6 us a step.
- keras_vit_eager: tests/tpu/programs/keras_vit.py, keras-io's Vision Transformer (`chip_keras.sh
  9`, session 38) on 2,560 samples, one epoch of 9 batches and a validation batch: its
  augmentation's RandomRotation and RandomZoom, which Keras marks `supports_jit = False`, turned
  jit off for the whole model, so `fit` ran 34,119 ops one by one (34,590 in the run), 552 of
  them compiled on their own (104 s), 14 s a batch by Keras's own progress bar, 150 s in all. The
  run is of keras_vit.py as it was at 6ec4a05 (its `fit` at line 115), which then failed after
  `fit` (exit 1) dividing by its empty list of timed epochs at `--epochs 1`; fixed since.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.schema import Finding
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"


@pytest.fixture(scope="module")
def xception(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Run, list[Finding]]]:
    runs = {}
    for name in ("keras_xception_f32", "keras_xception_bf16"):
        run_dir = tmp_path_factory.mktemp("keras") / name
        shutil.copytree(RUNS / name, run_dir)
        run = Run(run_dir)
        runs[name] = (run, analyze(run).findings)
    return runs


def _device_step_s(run: Run) -> float:
    return float(run.device_steps["busy_ns"].median()) / 1e9


def test_float32_costs_what_mixed_bfloat16_saves_on_the_device(xception: dict) -> None:
    """The f32 card's measured loss is within 10% of the device time the mixed_bfloat16 twin
    saved: batch norm, pooling and the depthwise convolutions (no MXU work) keep their pace in
    bf16, 1.1-1.45x their ideal in both (analyze/f32_waste.bounded_saving); taking the twin at
    their ideal said 44.35 ms (1.18x)."""
    run, findings = xception["keras_xception_f32"]
    twin, twin_findings = xception["keras_xception_bf16"]
    truth = _device_step_s(run) - _device_step_s(twin)
    assert truth == pytest.approx(37.5e-3, rel=0.02)
    (card,) = [f for f in findings if f.rule == "tensorcore_underuse"]
    evidence = card.evidence.to_dict()
    assert evidence["kind"] == "f32" and evidence["precision"] == ["default"]
    assert 0.9 * truth <= evidence["lost_s_per_step"] <= 1.1 * truth
    assert card.location is not None and card.location.endswith("keras_xception.py:86")
    assert 'set_global_policy("mixed_bfloat16")' in card.fix  # Keras's way, not a Flax dtype
    assert "Flax" not in card.fix
    assert [f for f in twin_findings if f.rule == "tensorcore_underuse"] == []


def test_the_ragged_last_batch_recompiles_at_the_fit_line(xception: dict) -> None:
    """1586 samples in batches of 128: the 50-sample last batch compiles Keras's train step
    again, once (16-19 s on the chip), at the program's `fit` line, not in Keras's files; the
    fix says what `fit` on arrays leaves the program to change."""
    for _run, findings in xception.values():
        (card,) = [f for f in findings if f.rule == "recompile"]
        assert card.location is not None and card.location.endswith("keras_xception.py:86")
        assert "f32[128,180,180,3] -> f32[50,180,180,3]" in card.detail
        assert "give it a whole number of batches (trim the arrays)" in card.fix


def test_keras_setup_compiles_get_no_advice_to_jit_what_keras_runs(xception: dict) -> None:
    """Keras's `fit` calls keras's own `train_step`, and its layers make their variables op by
    op (38 compiles of 0.1-0.5 s on the chip, at the model's lines): the card names the
    persistent cache with JAX's minimum compile time at 0, not `jax.jit(init)` or a
    `.lower().compile()` of a step the program never calls."""
    for _run, findings in xception.values():
        (card,) = [f for f in findings if f.rule == "compile_time"]
        assert "jax_persistent_cache_min_compile_time_secs" in card.fix
        assert "keras/src/backend/jax/trainer.py" in card.fix
        assert "jax.jit(init)" not in card.fix and ".lower(" not in card.fix


def test_a_loop_of_its_own_keeps_the_advice_to_jit_its_setup(tmp_path: Path) -> None:
    """`mlp_train.py --eager` (tests/tpu/runs/mlp_eager) jits nothing of its own: its step is
    optax's most-called jitted function, a library's, but the loop and the setup are the
    program's, so the card still says to jit the setup (Keras's alone is told otherwise); it
    no longer says to compile `tree_bias_correction` ahead of the loop."""
    run_dir = tmp_path / "mlp_eager"
    shutil.copytree(RUNS / "mlp_eager", run_dir)
    (card,) = [f for f in analyze(Run(run_dir)).findings if f.rule == "compile_time"]
    assert "optax" in str(Run(run_dir).meta["processes"][0]["jax_step_source"])
    assert "Jit the setup" in card.fix and "Keras" not in card.fix
    # optax's function, which the program never calls itself, is not one to compile ahead
    assert ".lower(" not in card.fix


def test_f32_pallas_kernels_are_named_and_not_costed(tmp_path: Path) -> None:
    """keras_transformer.py at key_dim 128 under Keras's float32 policy (`chip_keras.sh 4`, 7
    December, main's collector): Keras runs Pallas's splash attention kernels in f32 too. Their
    matmuls are inside custom calls, with no FLOPs in the HLO or the trace, so the f32 card's
    cost (3.5 ms a step, against 6.76 ms of the bare float32 step over its mixed_bfloat16 twin)
    leaves them out: the card names them and their measured time, and says what bf16 would
    save there is not known."""
    run_dir = tmp_path / "keras_transformer_f32"
    shutil.copytree(RUNS / "keras_transformer_f32", run_dir)
    run = Run(run_dir)
    cards = [f for f in analyze(run).findings if f.rule == "tensorcore_underuse"]
    (card,) = [f for f in cards if f.evidence.to_dict()["kind"] == "f32"]
    evidence = card.evidence.to_dict()
    assert len(evidence["f32_kernels"]) == 12  # forward, dq and dkv kernels of 4 layers
    assert all(name.startswith("splash_mha_") for name in evidence["f32_kernels"])
    events = run.trace_events
    ops = events[events["line"].astype(str) == "XLA Ops"]
    kernels = ops[ops["hlo_op"].astype(str).isin(evidence["f32_kernels"])]
    # each kernel runs once a step: the step's kernel time is the sum of their typical runs
    per_step = float(kernels.groupby(kernels["hlo_op"].astype(str))["dur_ns"].median().sum()) / 1e9
    assert evidence["f32_kernels_s"] == pytest.approx(per_step, rel=0.03)
    assert 12e-3 < per_step < 14e-3
    assert "not known" in card.detail and "Pallas kernel" in card.detail


def test_a_host_bound_fit_gets_keras_own_fix(tmp_path: Path) -> None:
    """keras-io's MNIST convnet idles the v5e 94% of a batch: the card's fix is Keras's own
    `steps_per_execution` (bare on the chip: 1.62 -> 1.06 ms a batch at 32), not the generic
    advice to jit the step or scan steps in one call, which `fit` does not let the program do."""
    run_dir = tmp_path / "keras_mnist"
    shutil.copytree(RUNS / "keras_mnist", run_dir)
    result = analyze(Run(run_dir))
    (card,) = [
        f
        for f in result.findings
        if f.rule == "tensorcore_underuse" and f.evidence.to_dict().get("idle_share")
    ]
    assert card.title == "device idle 94% of the step: the step is host-bound"
    assert "steps_per_execution=N" in card.fix and "keras/src/backend/jax/trainer.py" in card.fix
    assert "jax.lax.scan" not in card.fix and "jax.jit" not in card.fix
    assert card.location is not None and card.location.endswith("keras_mnist.py:55")
    assert result.summary.step_time_p50_ms == pytest.approx(1.51, abs=0.01)


def test_a_fit_that_runs_the_model_op_by_op_names_keras_reason(tmp_path: Path) -> None:
    """The ViT's `fit` never jitted its step: the op-by-op card is high, costs the run's time
    outside its compiles (no trace: the ops' dispatches hold their own compiles), names the layers
    Keras cannot jit and says to take it out of the model, not to decorate a train_step the
    program does not have; compile_time does not call those ops setup to jit."""
    run_dir = tmp_path / "keras_vit_eager"
    shutil.copytree(RUNS / "keras_vit_eager", run_dir)
    findings = {f.rule: f for f in analyze(Run(run_dir)).findings}
    card = findings["op_by_op"]
    assert card.severity == "high"
    assert card.evidence.to_dict()["cost_basis"] == "time outside compiles"
    assert card.cost_s == pytest.approx(150.0 - 103.75, abs=0.1)
    assert "RandomRotation (random_rotation.py), RandomZoom (random_zoom.py)" in card.fix
    assert "jit_compile" in card.fix and "take them out of the model" in card.fix
    assert "@jax.jit" not in card.fix
    assert card.location is not None and card.location.endswith("keras_vit.py:115")
    compile_fix = findings["compile_time"].fix
    assert "jax.jit(init)" not in compile_fix and "Keras's model run without jit" in compile_fix


def test_a_keras_model_under_a_jitted_step_of_its_own_is_not_keras_eager(tmp_path: Path) -> None:
    """Keras builds its variables op by op, so a run's eager ops can all be Keras's while its
    step is jitted: with the MNIST run's step source made a program's own jitted function, no
    op-by-op card stands and compile_time keeps its advice for setup, not Keras's eager model."""
    run_dir = tmp_path / "keras_mnist"
    shutil.copytree(RUNS / "keras_mnist", run_dir)
    (proc,) = (run_dir / "procs").glob("*.json")
    meta = json.loads(proc.read_text())
    meta["jax_step_source"] = "calls of jitted train_step (/home/u/train.py:40)"
    proc.write_text(json.dumps(meta))
    findings = {f.rule: f for f in analyze(Run(run_dir)).findings}
    assert "op_by_op" not in findings
    assert "Keras's model run without jit" not in findings["compile_time"].fix
