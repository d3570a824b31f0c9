"""Host callbacks in a jitted step on a real TPU v5e (JAX 0.10.2), read from the default-mode
`tpuscope run`s that tests/tpu/chip_callbacks.sh 2 made (tests/tpu/runs/cb_*): what a callback
costs there is what the device waited for the host, measured in the trace.

tests/tpu/programs/mlp_train.py (the bf16 Adam MLP, 1.7092 ms a step bare without a callback,
60 steps) with `--callback print` (a `jax.debug.print` of the loss), `pure` (a numpy function
of the loss through `jax.pure_callback`) or `io` (an ordered `io_callback` that logs the loss)
took, bare on the same chip (`chip_callbacks.sh 1`): 4.1629, 3.9281 and 5.6865 ms a step.
Python's own time in them was 11-134 us a step (CPU): the device's waits in the callbacks' `send-done`
and `recv-done` (the trace's host transfers at the callback's line) are the cost.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"
BARE_S = 1.7092e-3  # the step without a callback
TRUTH_S = {"print": 4.1629e-3 - BARE_S, "pure": 3.9281e-3 - BARE_S, "io": 5.6865e-3 - BARE_S}
NAMES = {
    "print": "cb_print-20261206-032215-2093",
    "pure": "cb_pure-20261206-032247-f980",
    "io": "cb_io-20261206-032320-bf19",
}


def _cards(kind: str, tmp_path: Path) -> dict[str, list]:
    run_dir = tmp_path / NAMES[kind]
    shutil.copytree(RUNS / f"cb_{kind}", run_dir)
    found: dict[str, list] = {}
    for finding in analyze(Run(run_dir)).findings:
        found.setdefault(finding.rule, []).append(finding)
    return found


@pytest.mark.parametrize("kind", ["print", "pure"])
def test_a_callback_costs_what_the_device_waited_for_it(kind: str, tmp_path: Path) -> None:
    """The print (which the device waits for on a TPU too) and the pure callback: one card at
    the callback's line, its cost the device's measured wait, within 10% of what the callback
    cost a step bare (before: the print no card, the pure callback 11 us)."""
    cards = _cards(kind, tmp_path)
    (card,) = cards["host_callback"]
    evidence = card.evidence.to_dict()
    judged = evidence["judged_steps"]
    assert card.cost_s / judged == pytest.approx(TRUTH_S[kind], rel=0.10)
    assert evidence["device_wait_s_per_step"] == pytest.approx(card.cost_s / judged)
    assert evidence["cpu_s_per_step"] < 0.1 * evidence["device_wait_s_per_step"]
    assert "a step for it (measured)" in card.title
    assert "`send-done` and `recv-done`" in card.detail
    assert card.severity == "high"
    assert card.location.endswith(f"mlp_train.py:{95 if kind == 'print' else 97}")


def test_an_ordered_callback_also_idles_the_device_between_steps(tmp_path: Path) -> None:
    """The ordered io_callback: the device waits 2.14 ms a step inside the step, and idles
    about as long between steps (its bare trace: 3.51 ms module runs 5.69 ms apart). The
    callback's card costs the first, the device-idle card the second; together 1.14 of what
    the callback cost bare. The idle card names the callback: between module runs the device
    idled 3.69 ms a traced step, 3.60 ms of it while the host was inside the step's call (the
    runtime held it), and the step holds the callback whose wait the trace measured. Which of
    the runtime's waits holds the call is not in the trace, and the card says so."""
    cards = _cards("io", tmp_path)
    (card,) = cards["host_callback"]
    (idle,) = cards["tensorcore_underuse"]
    judged = card.evidence.to_dict()["judged_steps"]
    assert card.cost_s / judged == pytest.approx(2.14e-3, rel=0.02)
    assert idle.title.startswith("device idle 39% of the step")
    assert idle.location == card.location and idle.location.endswith("mlp_train.py:100")
    assert idle.evidence.to_dict()["idle_in_calls_s_per_step"] == pytest.approx(3.60e-3, rel=0.01)
    assert "3.60 ms of it while the host was inside a jitted call" in idle.detail
    assert "io_callback(append) at mlp_train.py:100" in idle.detail
    assert "not in the trace" in idle.detail
    assert idle.fix.startswith("Take the host callback out of the step")
    both = (card.cost_s + idle.cost_s) / judged
    assert TRUTH_S["io"] < both < 1.2 * TRUTH_S["io"]


def test_a_callback_s_wait_is_its_own_line_s_and_kind_s() -> None:
    """Two callbacks written on one line each take their own kind's transfers (the HLO's
    op_type); a file name that two folders hold at the same line matches neither; no wait, or a
    zero one, is no measurement."""
    import pandas as pd

    from tpuscope.detect.host_callback import _wait_at

    waits = pd.DataFrame(
        {
            "source": ["/p/train.py:9", "/p/train.py:9", "/a/model.py:4", "/b/model.py:4"],
            "kind": ["debug_print", "pure_callback", "io_callback", "io_callback"],
            "time_s": [2e-3, 1e-3, 5e-4, 5e-4],
        }
    )
    assert _wait_at(waits, "/p/train.py:9", "jax.debug.print") == 2e-3
    assert _wait_at(waits, "/p/train.py:9", "jax.pure_callback") == 1e-3
    assert _wait_at(waits, "/elsewhere/train.py:9", "jax.pure_callback") == 1e-3
    assert _wait_at(waits, "/c/model.py:4", "jax.experimental.io_callback") is None
    assert _wait_at(waits, "/p/train.py:10", "jax.debug.print") is None
    zero = waits.assign(time_s=0.0)
    assert _wait_at(zero, "/p/train.py:9", "jax.debug.print") is None
