"""The JAX step clock on a real TPU v5e (JAX 0.10.2), `tests/tpu/chip_keras.sh 4` and `5` (7
December), in the default mode: four device-bound loops whose host runs ahead of the device,
each step's time against the device's own step in the profiler window's trace
(`device_steps`, busy time). The committed tables are the steps, the device steps and the meta.

Before this round (main's clock, the same chip, the same day) the steps were timed at the
host's dispatches or spread over a backlog:

| run | device step | p50 before | p50 now |
|---|---|---|---|
| keras_xception.py, float32 (Keras `fit`: each epoch's logs read on Keras's callback thread) | 96.24 ms | 109.47 ms | 96.17 ms |
| keras_xception.py, mixed_bfloat16 | 58.78 ms | (not run) | 58.91 ms |
| gpt_attention.py --attn dpa --heads 8 (never reads before its end) | 24.89 ms | 0.91 ms | 24.94 ms |
| lm_decoder.py --heads 8 (flax; never reads before its end) | 21.94 ms | 3.09 ms (6 December) | 21.98 ms |

A step whose host interval took 5 ms or more (collect/jax/ready.py HELPER_STEP_NS) is timed
by the helper thread; the profiler's stop hands it the steps only polled; only steps found
ready count towards the lane. The dispatch-bound `tiny_step.py` still takes the lane: 188.69
and 182.74 us bare against 193.03 and 188.56 us under tpuscope (1.02x, 1.03x), 5,980 and 5,982
of its 6,000 steps in the lane.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"


@pytest.mark.parametrize(
    "name",
    ["clock_keras_xception_f32", "clock_keras_xception_bf16", "clock_dpa_hd128", "clock_lm_hd128"],
)
def test_a_device_bound_steps_p50_is_the_devices_step(name: str, tmp_path: Path) -> None:
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    run = Run(run_dir)
    device_s = float(run.device_steps["busy_ns"].median()) / 1e9
    p50_s = analyze(run).summary.step_time_p50_ms / 1e3
    assert p50_s == pytest.approx(device_s, rel=0.03)
    (process,) = run.meta["processes"]
    paths = process["jax_step_paths"]
    assert paths["lane"] == 0 and paths["watched"] > 0, paths
