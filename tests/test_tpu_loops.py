"""Loops the chip corpus lacked, on a real TPU v5e (JAX 0.10.2), read from the default-mode
`tpuscope run`s of tests/tpu/chip_loops.sh 2 (tests/tpu/runs/): truths measured bare on the
same chip the same hour (`chip_loops.sh 1`, each program's own mean step time).

- mlp_log1: tests/tpu/programs/mlp_train.py (the bf16 Adam MLP) with `--log-every 1`, which
  reads its loss every step (`history.append(float(loss))`): 3.1445 ms a step bare against
  1.7450 ms without the read.
- scan_hd64 / scan_remat128: tests/tpu/programs/lm_decoder.py `--scan` (the Flax decoder's
  blocks in one `nn.scan`, MaxText's scan_layers: the layers an XLA while loop) at head_dim
  64 (16 heads): 35.4044 ms; at head_dim 128 (8 heads) 28.5653 ms, with `nn.remat` 28.1038 ms.
- cb_print2: `mlp_train.py --callback print` again, under the lane that anchors its batches
  only where the device had caught up (collect/jax/lane.py PACE_DEPTH, BACKLOG; the run: this
  round's first form, the same anchors for this run, docs/tpu.md): 4.1519 ms a step bare,
  4.3878 ms by its own timing under tpuscope.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"
READ_LOST_S = 3.1445e-3 - 1.7450e-3  # what reading the loss every step cost, bare
HEAD_DIM_LOST_S = 35.4044e-3 - 28.5653e-3  # head_dim 64 against 128, both scanned


def _cards(name: str, tmp_path: Path) -> dict[str, list]:
    """The run's cards by rule, analysed by this code from the committed tables."""
    run_dir = tmp_path / name
    shutil.copytree(RUNS / name, run_dir)
    found: dict[str, list] = {}
    for finding in analyze(Run(run_dir)).findings:
        found.setdefault(finding.rule, []).append(finding)
    return found


def test_a_loss_read_every_step_costs_the_device_idle_time_it_makes(tmp_path: Path) -> None:
    """The read does not cut a jitted step; what it costs is the device idling while the host
    finishes its iteration and dispatches the next step. The trace's idle time in the steps
    that read, at most the longer of the host's wait in the reads (2.67 ms) and the device's
    busy time: all of the 1.34 ms idle, within 10% of what the read cost bare (1.40 ms; 1.30
    ms before, when each step's idle was held to its busy time), and the idle card, whose cost would be the same time,
    defers to it (before: the host_sync card said
    "0.000 s of TransferFromDeviceTime" and the idle card "device idle 45%: host-bound")."""
    cards = _cards("mlp_log1", tmp_path)
    assert "tensorcore_underuse" not in cards
    (card,) = cards["host_sync"]
    evidence = card.evidence.to_dict()
    assert evidence["read_lost_s_per_step"] == pytest.approx(READ_LOST_S, rel=0.10)
    assert evidence["device_idle_s_per_step"] == pytest.approx(1.34e-3, rel=0.01)
    assert card.cost_s == pytest.approx(evidence["read_lost_s_per_step"] * 38)  # judged steps
    assert card.location.endswith("mlp_train.py:147")  # history.append(float(loss))
    assert "TransferFromDeviceTime" not in card.detail and "graph cut" not in card.detail
    assert "the device idled 1.34 ms a traced step that read (measured); the host waited" in (
        card.detail
    )


def test_attention_inside_a_scan_over_layers_gets_the_narrow_heads_card(tmp_path: Path) -> None:
    """The blocks an XLA while loop: the attention's ops, timed each layer, still found by
    their shapes; the estimate (half the attention ops' measured time) is 0.75 of what head_dim
    128 saved bare, as for the unrolled decoder (0.87 there), and stands at the step's call."""
    cards = _cards("scan_hd64", tmp_path)
    (card,) = cards["tensorcore_underuse"]
    evidence = card.evidence.to_dict()
    assert evidence["kind"] == "head_dim"
    assert evidence["lost_s_per_step"] == pytest.approx(5.14e-3, rel=0.02)
    assert 0.7 * HEAD_DIM_LOST_S < evidence["lost_s_per_step"] < HEAD_DIM_LOST_S
    assert card.location.endswith("lm_decoder.py:129")


def test_a_scanned_rematerialised_decoder_at_head_dim_128_has_no_tensorcore_card(
    tmp_path: Path,
) -> None:
    """Head_dim 128 and `nn.remat` (which recomputes the blocks' activations: 28.10 ms bare
    against 28.57 without it, nothing lost): no TensorCore card."""
    assert "tensorcore_underuse" not in _cards("scan_remat128", tmp_path)


def test_a_device_falling_slowly_behind_has_its_steps_at_its_own_pace() -> None:
    """The print callback's device is a little slower than its host. The lane's batches now end
    only where the device had caught up: its 22 steps (18-39) share the stretch up to the
    program's last read, 4.89 ms each, where the lane of 6 December wrote 16 of them at the
    host's 2.98 ms and the last 6 at 9.41 ms (tests/tpu/runs/cb_print: p50 0.72 of the program's
    own 4.16 ms). The steps before the lane (10-17, polled: ready.py ends them at their host
    ends) are still the host's, so the stretch after them carries their backlog: p50 1.11 of
    the program's own timing (docs/tpu.md)."""
    own_s = {"cb_print": 4.1629e-3, "cb_print2": 4.3878e-3}
    p50 = {}
    for name in own_s:
        steps = Run(RUNS / name).table("steps")
        p50[name] = float(np.median(steps["wall_ns"].iloc[2:])) / 1e9
    assert p50["cb_print"] < 0.75 * own_s["cb_print"]
    assert 0.95 * own_s["cb_print2"] < p50["cb_print2"] < 1.15 * own_s["cb_print2"]
    lane = Run(RUNS / "cb_print2").table("steps")["wall_ns"].iloc[18:].to_numpy()
    assert np.ptp(lane) < 0.01 * lane.mean()  # one stretch, evenly shared


def test_a_trace_of_several_devices_costs_a_read_once(tmp_path: Path) -> None:
    """device_steps holds a row per device and step: the same run with a second device's rows
    (the first's, copied) costs the read what one device idled, not twice that."""
    import pandas as pd

    run_dir = tmp_path / "mlp_log1"
    shutil.copytree(RUNS / "mlp_log1", run_dir)
    (part,) = (run_dir / "device_steps").glob("*.parquet")
    rows = pd.read_parquet(part)
    pd.concat([rows, rows.assign(device="/device:TPU:1")]).to_parquet(part, index=False)
    (card,) = [f for f in analyze(Run(run_dir)).findings if f.rule == "host_sync"]
    assert card.evidence.to_dict()["read_lost_s_per_step"] == pytest.approx(1.34e-3, rel=0.01)
