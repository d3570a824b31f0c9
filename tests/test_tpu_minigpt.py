"""jax-ml/jax-ai-stack's "Train a miniGPT language model with JAX" tutorial on a real TPU v5e (JAX
0.10.2), under `tpuscope run` in the default mode: tests/tpu/runs/minigpt (`tests/tpu/chip_minigpt.sh
3`, 7 December; the program is tests/tpu/programs/minigpt.py's build of the tutorial: an NNX GPT
of 4 blocks of 8 heads of 32, width 256, GPT-2's 50,257 ids, float32, Grain batches of 144, 256
tokens generated before training, at step 200 and after it; 250 training steps). Its trace
events keep the Python tracer's events of 1 ms or more (39,808 of 3.1 million; the report read
from either is the same).

Truth, bare on the same chip (the tutorial's step with a wait every 5 steps, the median of 45
five-step spans, `chip_minigpt.sh 3` and `4`):
- the f32 step 161.8563 ms; its bf16 twin (`dtype=bfloat16` on the layers) 162.5135 ms: the
  device's f32 time costs the step nothing (in 60-step clocks, `chip_minigpt.sh 1`: f32
  170.1220 ms, the head_dim 128 twin 166.8531 ms, 1.02);
- JAX's own compile log (JAX_LOG_COMPILES=1, two bare runs): 8 compiles of `generate_step`
  (7 after its first: the padded input grows to 257-259 tokens, before training and again
  after the parameters' sharding changed) and 2 of `train_step`; the 7 recompiles' backend
  compile 71.97 s and 77.02 s, the two `train_step` compiles 27.25 s and 27.31 s.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.chip_runs import analysed
from tpuscope.detect.eager_counts import steady

F32_MS, BF16_MS = 161.8563, 162.5135  # bare, 250-step clocks
BARE_GENERATE_RECOMPILES = 7  # JAX_LOG_COMPILES: 8 compiles of generate_step, bare


@pytest.fixture(scope="module")
def minigpt(tmp_path_factory: pytest.TempPathFactory):
    report, _ = analysed(tmp_path_factory, "minigpt")["minigpt"]
    return report


def _cards(report, rule: str) -> list:
    return [f for f in report.findings if f.rule == rule]


def test_the_loop_is_the_training_not_the_generation_before_it(minigpt) -> None:
    """The 256 generation steps before training are setup: the loop is 249 steps of
    `train_step`, 247 judged after 2 of warm-up, and their p50 is within 2% of the bare step."""
    assert minigpt.summary.steps == 249
    assert minigpt.summary.steps_judged == 247
    assert minigpt.summary.step_time_p50_ms == pytest.approx(F32_MS, rel=0.02)


def test_the_generation_s_growing_input_is_the_first_card_with_bare_s_count(minigpt) -> None:
    """Upstream's `generate_text` pads to maxlen only while the text is shorter: every new length
    compiles `generate_step` again, as many times as JAX's own log counts bare."""
    first = minigpt.findings[0]
    assert (first.rule, first.severity) == ("recompile", "high")
    assert first.title == (
        "7 recompiles at generate_step (minigpt.py:243): dim 1 of padded_tokens took 4 sizes"
    )
    assert len(first.evidence.compiles) == BARE_GENERATE_RECOMPILES
    assert first.location.endswith("minigpt.py:243")
    # the loop's own are the 4 of the generation at step 200: its later ones reuse them (bare,
    # the final generation compiled nothing); the 3 before training are its setup's, no rate
    assert "one-off so far: no new graph in the 50 steps after step 454." in first.detail
    # the sharding change that made the second round: its own one-off card at train_step
    [sharding] = [f for f in _cards(minigpt, "recompile") if f is not first]
    assert sharding.severity == "medium" and sharding.title.endswith(
        "at train_step (minigpt.py:358)"
    )
    assert "input sharding of model.states[0][0]" in sharding.detail


def test_text_generated_inside_two_steps_is_not_every_step_op_by_op(minigpt) -> None:
    """A training step dispatches 7 primitives outside jit; the two steps whose windows held a
    generation dispatched 525 and 512. The mean, 11.1, had called every step op by op at the
    generation's line; without the two bursts the loop's steps dispatch 7."""
    assert not _cards(minigpt, "op_by_op")


def test_rare_bursts_leave_the_loop_s_count_but_a_pattern_stays() -> None:
    """Bursts in 5% of the steps or fewer are left out; a burst every third step is the loop's
    (its mean, 100 a step, is what it dispatches); a loop at the threshold keeps its mean."""
    frame = pd.DataFrame({"step": range(249), "count": [7] * 247 + [525, 512]})
    assert steady(frame)["count"].mean() == 7
    third = pd.DataFrame({"step": range(300), "count": [300, 0, 0] * 100})
    assert steady(third)["count"].mean() == 100
    rnn = pd.DataFrame({"step": range(2000), "count": [10] * 1996 + [2, 6, 87, 10]})
    assert steady(rnn)["count"].mean() < 10  # Equinox's RNN: the idle card's, as before


def test_the_host_bound_step_names_the_loader_and_nnx_s_traversal(minigpt) -> None:
    """The device is busy 77.56 ms of a 162 ms step. That the host bounds it is the bf16 twin's
    truth: halving the matmuls' device time left the bare step where it was (162.51 against
    161.86 ms)."""
    [idle] = [
        f for f in _cards(minigpt, "tensorcore_underuse") if f.title.startswith("device idle")
    ]
    assert (
        idle.severity == "high"
        and idle.title == "device idle 52% of the step: the step is host-bound"
    )
    assert idle.location.endswith("minigpt.py:279")  # TextDataset.__getitem__: tiktoken, padding
    assert "__getitem__ (minigpt.py:279)" in idle.fix and "nnx.cached_partial" in idle.fix
    assert abs(BF16_MS - F32_MS) / F32_MS < 0.01


def test_the_device_s_f32_and_narrow_heads_cost_the_host_bound_step_nothing(minigpt) -> None:
    """Both measured on the device and both low: the bf16 twin ran at 1.00 of the f32 step, the
    head_dim 128 twin at 1.02."""
    device = [f for f in _cards(minigpt, "tensorcore_underuse") if f.evidence.kind]
    assert {f.evidence.kind: (f.severity, f.cost_s) for f in device} == {
        "f32": ("low", 0.0),
        "head_dim": ("low", 0.0),
    }
    assert all("none of the host-bound step's time" in f.title for f in device)


def test_the_cost_line_reads_the_step_s_busy_share_as_the_idle_card_does(minigpt) -> None:
    """In the traced steps, which JAX's Python tracer slowed, the device was busy 12%; against
    the untraced step, 48%. The report's cost line said the first while the card said the
    second."""
    [idle] = [
        f for f in _cards(minigpt, "tensorcore_underuse") if f.title.startswith("device idle")
    ]
    assert minigpt.summary.device_busy_share == pytest.approx(
        1 - idle.evidence.idle_share, abs=1e-3
    )
