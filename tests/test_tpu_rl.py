"""luchris429/purejaxrl's `purejaxrl/ppo.py` on a real TPU v5e (JAX 0.10.2, flax 0.12.8, gymnax
0.0.9), upstream's code as it is (tests/tpu/programs/purejaxrl.py), run under `tpuscope run` in
the default mode with the round's last code (`tests/tpu/chip_rl.sh 3`, session 41):

- rl_ppo: PPO on gymnax's CartPole-v1, the whole training (976 updates of 4 environments x 128
  steps) one `jax.jit` call, with its DEBUG config on: at each update a `jax.debug.callback`
  prints the returns of the episodes that ended, indexing its arguments (jax.Arrays) with a
  boolean mask.
- rl_ppo_nodebug: the same with DEBUG off (no callback).

Truth, bare on the same chip (timed_main.py, parts 1 and 2: the call compiled ahead, its run
timed apart): 21.943 and 20.935 s a run; with the callback's arguments made numpy arrays first
4.583 and 4.639 s (16.83 s saved, the mean of the pairs); DEBUG off 2.466 s (the callback's
whole cost 19.48 s against the first pair).

Before this round the run on the chip (part 1) had one card, compile_time, whose advice was to
"jit the setup that runs op by op" at the callback's lines: the callback ran on the runtime's
thread once the program's one call had returned and the step had closed, so its runs counted in
no step, and no card named it. On the CPU, where the callback runs inside the call, the same
program had an op_by_op card telling it to put its step under jit. Neither run said that the
device's op times were not measured.
"""

from __future__ import annotations

import pytest

from tests.chip_runs import analysed
from tpuscope.report.console import headline_rows

CALLBACK_S = 21.943 - 2.466  # ppo.py against DEBUG off, the first pair
NUMPY_SAVED_S = ((21.943 - 4.583) + (20.935 - 4.639)) / 2  # against ppo_numpy.py, both pairs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {
        name: report
        for name, (report, _) in analysed(tmp_path_factory, "rl_ppo", "rl_ppo_nodebug").items()
    }


def test_the_callbacks_ops_on_its_arguments_cost_what_the_callback_costs_bare(runs) -> None:
    """The callback is a card at its line: its runs took 18.90 s of host time against the
    one step's 15.33 s outside compiles (the host fell behind the device); the cost is within
    10% of the callback's whole cost bare (DEBUG off), and numpy first saved 0.89 of it. Its
    Python ran 22,988 JAX ops and 202 compiles (15.1 s); its fix leads with numpy."""
    (card,) = [f for f in runs["rl_ppo"].findings if f.rule == "host_callback"]
    evidence = card.evidence
    assert card.severity == "high" and card.location.endswith("rl/ppo.py:261")
    assert evidence.outpaced and evidence.device_wait_s_per_step is None and not evidence.waited
    assert card.cost_s == pytest.approx(CALLBACK_S, rel=0.1)
    assert NUMPY_SAVED_S < card.cost_s < 1.15 * NUMPY_SAVED_S
    assert evidence.runs_per_step == 976 and evidence.ops_per_step == 22_988
    assert evidence.op_compiles == 202 and evidence.op_compile_s == pytest.approx(15.08, abs=0.01)
    assert card.fix.startswith("Make the callback's arguments numpy arrays")
    assert "which the program waits for" in card.title


def test_the_callbacks_compiles_are_its_own_not_setup_run_op_by_op(runs) -> None:
    """The compile card counts the callback's 202 compiles apart and points at its card; no
    op-by-op card (the program ran 2 ops outside jit, making its key)."""
    ppo = runs["rl_ppo"]
    (card,) = [f for f in ppo.findings if f.rule == "compile_time"]
    assert "202 ops run by host callbacks 15.1 s" in card.title
    assert "Jit the setup" not in card.fix and "are a host callback's" in card.fix
    assert card.location.endswith("rl/ppo.py:297")  # the step's compile, 16.6 s, the costliest
    assert {f.rule for f in ppo.findings} == {"compile_time", "host_callback"}


def test_a_run_of_one_call_says_its_device_was_not_measured(runs) -> None:
    """Both runs are one step: the automatic trace (steps 3-7) never started, and the report
    says that the TensorCore was not measured and how to trace the step; DEBUG off, the only
    card is the compile's."""
    for report in runs.values():
        assert report.summary.trace_untaken == {"start": 3, "stop": 8}
        line = dict(headline_rows(report.summary))["device trace"]
        assert line.startswith("none: the run had 1 step, and the automatic trace takes steps 3-7")
    assert [f.rule for f in runs["rl_ppo_nodebug"].findings] == ["compile_time"]
