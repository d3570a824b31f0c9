"""Two of google/flax's own examples on a real TPU v5e (JAX 0.10.2, flax 0.12.8), run from a
snapshot as a new user runs them (`tests/tpu/chip_flax.sh`, 6 December; the snapshot made
runnable by tests/tpu/programs/flax_examples.py, not committed) under `tpuscope run` in the
default mode, with their truths measured bare on the same chip:

- flax_seq2seq: `examples/seq2seq/train.py` (a linen LSTM encoder-decoder learning addition,
  batch 128, its batches made in Python each step by `CharacterTable.get_batch`; 1201 steps,
  decoding every 200; `chip_flax.sh 1`). Bare, its timed copy ran 7.857 ms a step, and the
  twin fed 16 batches made before the loop 1.694 ms: making the batches cost 6.16 ms a step.
- flax_nnx_vae: `examples/nnx_toy_examples/05_vae.py` (an NNX VAE, `nnx.jit`, reading its loss
  back with `np.asarray` every step; 5 epochs of 200 steps; `chip_flax.sh 2`, this code). Bare,
  3.18 ms a step (3.36 in round 1); its twin reading the losses once an epoch 2.69 ms (round 1
  2.69): the read cost 0.50 ms a step (0.67 in round 1), and timed by itself in an untraced
  copy it took 0.47-0.49 ms a step.
- flax_lm1b, flax_lm1b_hd128 (session 34): `examples/lm1b` (a Transformer LM, 6 layers, width
  512, packed sequences of 128, bf16, `jax.jit` over a mesh; made runnable by
  tests/tpu/programs/flax_lm1b.py: synthetic packed batches for its tf.data pipeline, clu's
  writer logging only) at its default 8 heads of 64 and with `--config.num_heads=4` (head_dim
  128, the width held); 800 steps, clu's own profile of steps 10-; `chip_flax.sh 3b`, `3u`.
  Bare, its timed copy ran 15.1526 ms a step at head_dim 64 and 14.4602 ms at 128.
- flax_imagenet, flax_imagenet_bf16 (session 35): `examples/imagenet` (ResNet-50 under
  `jax.pmap`, its default config: f32, batch 128, SGD; random images of its shape for its
  tf.data pipeline, tests/tpu/programs/flax_imagenet.py) as configured and with
  `--config.half_precision=True`; 200 steps, `chip_flax.sh 5` (bare) and `6`. Bare, upstream's
  own log over steps 100-199: 10.8681 steps a second in f32 (92.013 ms a step) and 20.7226 in
  bf16 (48.257 ms). The committed tables leave out 2,017,130 host events named `Transpose`
  (libtpu's threads laying out each 77 MB batch of images for the device; no rule reads them),
  which made each table 7.7 MB.
- flax_imagenet_placed: the f32 program with the fix of its recompile card applied
  (`main_placed.py`: the state placed once before the loop with the sharding its pmapped step
  returns it in; `chip_flax.sh 7`). Its run under tpuscope took 143.1 s against 175.6 s.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpuscope.analyze.op_time import measured_ops
from tpuscope.detect.run_analysis import analyze
from tpuscope.schema import Finding
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"
SEQ2SEQ_BARE_S = 7.857e-3  # a step of the timed copy, bare
VAE_BARE_S = 3.18e-3  # the same hour as the committed run
READ_LOST_S = (0.50e-3, 0.67e-3)  # the read's cost bare, two rounds: its twin's step against it
LM1B_BARE_S = {"flax_lm1b": 15.1526e-3, "flax_lm1b_hd128": 14.4602e-3}  # timed copy, bare
IMAGENET_BARE_S = {"flax_imagenet": 1 / 10.8681, "flax_imagenet_bf16": 1 / 20.7226}  # its log
IMAGENET_BARE_S["flax_imagenet_placed"] = IMAGENET_BARE_S[
    "flax_imagenet"
]  # the fix: no step change


def _analyzed(name: str, tmp_path: Path) -> tuple[Run, list[Finding]]:
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    run = Run(run_dir)
    return run, analyze(run).findings


def test_seq2seq_is_host_bound_at_the_batch_it_makes_in_python(tmp_path: Path) -> None:
    """The LSTM's 280 us of device work a step waits on `get_batch` (Python string work for 128
    examples, 6.16 ms of the 7.86 ms step bare): the idle card stands at get_batch and names it
    first among the host's parts; no other step card (decoding every 200 steps reads 0.04 values
    a step). Its cost is the device's idle time, 7.92 ms a step, of which the batches are 6.16:
    the rest is the host's dispatch and Python, which the twin fed premade batches still paid."""
    run, findings = _analyzed("flax_seq2seq", tmp_path)
    assert run.steps["wall_ns"].iloc[10:].median() / 1e9 == pytest.approx(SEQ2SEQ_BARE_S, rel=0.06)
    (idle,) = [f for f in findings if f.rule == "tensorcore_underuse"]
    assert idle.title == "device idle 97% of the step: the step is host-bound"
    assert idle.location is not None and idle.location.endswith("seq2seq/input_pipeline.py:130")
    assert "get_batch (input_pipeline.py:130)" in idle.detail.split("the dispatch of")[0]
    assert {f.rule for f in findings} == {"compile_time", "tensorcore_underuse"}


def test_an_nnx_vae_reading_its_loss_every_step_pays_the_read_s_wait(tmp_path: Path) -> None:
    """A host-bound step (26 us of device work under nnx.jit's graph traversal) adds each read's
    whole wait to its time, not the device's busy time: the host waited 0.56 ms a traced step in
    the read (JAX's `np.asarray(jax.Array)` marks), within the two rounds' bare costs (0.50-0.67
    ms; the read timed by itself 0.47-0.49 ms). Before, the card held the cost to the device's
    busy time: [low] 23 us. The trace's end, where tpuscope waits for the device, is no read of
    the program's (before: a `block_until_ready` site at the step's line)."""
    run, findings = _analyzed("flax_nnx_vae", tmp_path)
    assert run.steps["wall_ns"].iloc[10:].median() / 1e9 == pytest.approx(VAE_BARE_S, rel=0.05)
    (sync,) = [f for f in findings if f.rule == "host_sync"]
    evidence = sync.evidence.to_dict()
    assert 0.9 * READ_LOST_S[0] <= evidence["read_lost_s_per_step"] <= 1.1 * READ_LOST_S[1]
    assert evidence["read_lost_s_per_step"] == evidence["read_wait_s_per_step"]
    assert sync.severity == "high"
    assert sync.location is not None and sync.location.endswith("nnx_vae/05_vae.py:166")
    assert [site["calls"] for site in evidence["sites"]] == [["np.asarray"]]
    idle = next(f for f in findings if f.title.startswith("device idle"))
    assert idle.location is not None and idle.location.endswith("nnx_vae/05_vae.py:165")
    assert "nnx.cached_partial" in idle.fix


def _lm1b(name: str, tmp_path: Path) -> tuple[Run, list[Finding], Finding]:
    """The run, its findings and its one TensorCore card; its p50 step as its bare twin's."""
    run, findings = _analyzed(name, tmp_path)
    p50_s = run.steps["wall_ns"].iloc[10:].median() / 1e9
    assert p50_s == pytest.approx(LM1B_BARE_S[name], rel=0.02)
    (card,) = [f for f in findings if f.rule == "tensorcore_underuse"]
    return run, findings, card


def _attention_core_s(run: Run) -> float:
    """Device time a traced step in the attention's own ops (its name scope's, less the q/k/v
    and output projections, which head_dim does not change), read from the trace."""
    per, _ = measured_ops(run.trace_events, sorted(run.device_steps["step"].unique()))
    ops = run.hlo_ops
    top = ops[ops["fusion"].isna()].drop_duplicates(["module", "name"])
    named = per.merge(top, left_on=["hlo_module", "hlo_op"], right_on=["module", "name"])
    scope = named["op_name"].astype(str)
    core = scope.str.contains("MultiHeadDotProductAttention") & ~scope.str.contains(
        r"/(?:query|key|value|out)/"
    )
    return float(named.loc[core, "time_s"].sum())


def test_lm1b_s_head_dim_card_measures_per_step_not_per_staged_leaf(tmp_path: Path) -> None:
    """flax's lm1b stages each batch leaf with `jnp.array` every step: six tiny `jit_stage`
    module runs beside each `jit_train_step` run. The op times were divided by the most runs of
    one module (6 a step), so every measured figure was a sixth of its size ("197 us of each
    3.14 ms device step"). Per step of the step's own graph, the module that holds the device
    time: the attention's ops take 1.89 ms of the 15.08 ms device step, and the card's half of
    them (0.94 ms) is within 10% of what the head_dim 128 twin's attention ops saved (0.90 ms,
    both traces). The twin's whole step saved less, 0.69 ms bare: it pays 0.2 ms copying its
    f32[512,4,128] q/k/v kernels and their Adam moments to another layout at each step's end,
    which its own run's card names (the next test)."""
    run, findings, card = _lm1b("flax_lm1b", tmp_path)
    twin, _ = _analyzed("flax_lm1b_hd128", tmp_path)
    evidence = card.evidence.to_dict()
    assert evidence["kind"] == "head_dim" and evidence["traced_steps"] == 5
    device_step_s = run.device_steps["busy_ns"].mean() / 1e9
    assert evidence["device_s_per_step"] == pytest.approx(device_step_s, rel=0.01)
    saved = _attention_core_s(run) - _attention_core_s(twin)
    assert evidence["lost_s_per_step"] == pytest.approx(saved, rel=0.1)
    truth = LM1B_BARE_S["flax_lm1b"] - LM1B_BARE_S["flax_lm1b_hd128"]
    assert 1.2 * truth < evidence["lost_s_per_step"] < 1.5 * truth  # the twin's copies, above
    # its steps are its own `StepTraceAnnotation`s: the step's graph is the module that ran in
    # every traced step (before: every jit compiled in the annotated loop's first steps, its
    # init, eval and decoding too, was "the step 105.4 s")
    (compile_card,) = [f for f in findings if f.rule == "compile_time"]
    assert "the step 73.5 s, setup and other 31.8 s, 23 ops outside jit 5.5 s" in compile_card.title
    assert "(init_train_state); train.py:338 1x 10.63 s (predict_step)" in compile_card.detail
    assert "the jitted `train_step` (called at train.py:543)" in compile_card.fix


def test_lm1b_at_head_dim_128_copies_its_kernels_at_the_step_s_boundary(tmp_path: Path) -> None:
    """At head_dim 128 XLA keeps the q/k/v kernels (f32[512,4,128]) and their Adam moments in
    another layout inside the step and copies 54 of them back at its end: 205 us of its 14.39
    ms device step, measured. The two twins' device steps differ by the bare truth (0.69 ms),
    and this run has no head_dim card."""
    run, _, card = _lm1b("flax_lm1b_hd128", tmp_path)
    other, _ = _analyzed("flax_lm1b", tmp_path)
    evidence = card.evidence.to_dict()
    assert evidence["kind"] == "relayouts"
    assert evidence["lost_s_per_step"] == pytest.approx(205e-6, rel=0.05)
    assert "54 result(s) on the way out" in card.title and "f32[512,4,128]" in card.title
    device_gap = (other.device_steps["busy_ns"].mean() - run.device_steps["busy_ns"].mean()) / 1e9
    truth = LM1B_BARE_S["flax_lm1b"] - LM1B_BARE_S["flax_lm1b_hd128"]
    assert device_gap == pytest.approx(truth, rel=0.05)


def _imagenet(name: str, tmp_path: Path) -> list[Finding]:
    """The run's findings; its p50 step as its bare twin's (upstream's steps per second)."""
    run, findings = _analyzed(name, tmp_path)
    p50_s = run.steps["wall_ns"].iloc[10:].median() / 1e9
    assert p50_s == pytest.approx(IMAGENET_BARE_S[name], rel=0.05)
    return findings


def test_imagenet_s_f32_card_is_what_its_bf16_twin_saved(tmp_path: Path) -> None:
    """ResNet-50 in f32: 160 convolutions and matmuls at default precision and the 323 ops
    that move their f32 activations (batch norm, ReLU, pooling and their gradients): 40.06 ms
    lost a step, measured, against the 43.76 ms its bf16 twin saved bare (0.92; 41.67 ms,
    0.95, with every op's twin at its bf16 ideal; 40.0 ms, 0.91, with each op's time x the
    share of its ideal that bf16 saves). Its bf16 twin gets no
    TensorCore card. Both get the program's recompile of its step at step 1 (its state from
    the jitted init on one device comes back from the pmapped step on a one-device mesh), and
    neither a host_sync card: its reads, 2 metrics every 100 steps and orbax's 430 reads of the
    checkpoint after the last step, are in 2 of its 200 loop steps (on the chip: [low] "2.2
    device-to-host reads per step")."""
    findings = _imagenet("flax_imagenet", tmp_path)
    (card,) = [f for f in findings if f.rule == "tensorcore_underuse"]
    evidence = card.evidence.to_dict()
    truth = IMAGENET_BARE_S["flax_imagenet"] - IMAGENET_BARE_S["flax_imagenet_bf16"]
    assert evidence["kind"] == "f32" and evidence["precision"] == ["default"]
    assert 0.9 * truth <= evidence["lost_s_per_step"] <= 1.1 * truth
    assert card.location is not None and card.location.endswith("imagenet/models.py:87")
    twin = _imagenet("flax_imagenet_bf16", tmp_path)
    assert [f for f in twin if f.rule == "tensorcore_underuse"] == []
    for run_findings in (findings, twin):
        assert "host_sync" not in {f.rule for f in run_findings}
        (recompile,) = [f for f in run_findings if f.rule == "recompile"]
        assert recompile.location is not None and recompile.location.endswith("train.py:379")
        assert "NamedSharding(mesh {'batch': 1}, P())" in recompile.fix


def test_imagenet_s_recompile_card_fix_removes_the_recompile_on_the_chip(tmp_path: Path) -> None:
    """The recompile card's fix, applied as it says (`jax.device_put(state, NamedSharding(mesh,
    P()))` once before the loop), compiles the pmapped step once: no recompile card, and the
    same f32 card (the fix changes where the state lives, not the step)."""
    findings = _imagenet("flax_imagenet_placed", tmp_path)
    assert "recompile" not in {f.rule for f in findings}
    run = Run(tmp_path / "flax_imagenet_placed")
    steps = run.compiles[run.compiles["location"].astype(str).str.endswith("train_placed.py:381")]
    assert len(steps) == 1
    (card,) = [f for f in findings if f.rule == "tensorcore_underuse"]
    (unplaced,) = [f for f in _imagenet("flax_imagenet", tmp_path) if f.rule == card.rule]
    lost = card.evidence.to_dict()["lost_s_per_step"]
    assert lost == pytest.approx(unplaced.evidence.to_dict()["lost_s_per_step"], rel=0.03)
