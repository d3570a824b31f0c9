"""luchris429/purejaxrl's `purejaxrl/ppo.py` on a real TPU v5e (JAX 0.10.2, flax 0.12.8, gymnax
0.0.9), upstream's code as it is (tests/tpu/programs/purejaxrl.py), run under `tpuscope run` in
the default mode (`tests/tpu/chip_rl.sh 2`, session 41: tests/tpu/runs/rl_ppo):

PPO on gymnax's CartPole-v1, the whole training (976 updates of 4 environments x 128 steps) one
`jax.jit` call, with its DEBUG config on: at each update a `jax.debug.callback` prints the
returns of the episodes that ended, indexing its arguments (jax.Arrays) with a boolean mask.
Truth, bare on the same chip (timed_main.py: the call compiled ahead, its run timed apart):
21.943 and 20.935 s a run; with the callback's arguments made numpy arrays first 4.583 and
4.639 s (the fix saves 16.83 s, the mean of the pairs); DEBUG off 2.466 s.

Before this round the run on the chip (part 1) had one card, compile_time, whose advice was to
"jit the setup that runs op by op" at the callback's lines: the callback ran on the runtime's
thread once the program's one call had returned and the step had closed, so its runs counted in
no step, and no card named it. On the CPU, where the callback runs inside the call, the same
program had an op_by_op card telling it to put its step under jit.
"""

from __future__ import annotations

import pytest

from tests.chip_runs import analysed

FIX_SAVED_S = ((21.943 - 4.583) + (20.935 - 4.639)) / 2  # ppo.py against ppo_numpy.py, bare
CALLBACK_S = 21.943 - 2.466  # ppo.py against DEBUG off, the first pair


@pytest.fixture(scope="module")
def ppo(tmp_path_factory: pytest.TempPathFactory):
    report, _ = analysed(tmp_path_factory, "rl_ppo")["rl_ppo"]
    return report


def test_the_callbacks_ops_on_its_arguments_cost_what_numpy_saves_on_the_chip(ppo) -> None:
    """The callback is a card at its line: its runs took 18.33 s of host time against the
    12.38 s the one step ran outside compiles (the host fell behind the device), the cost
    within 10% of what making its arguments numpy arrays saved bare; its Python ran 22,988 JAX
    ops and 202 compiles (14.5 s), and its fix leads with numpy."""
    (card,) = [f for f in ppo.findings if f.rule == "host_callback"]
    evidence = card.evidence
    assert card.severity == "high" and card.location.endswith("rl/ppo.py:261")
    assert evidence.outpaced and evidence.device_wait_s_per_step is None
    assert card.cost_s == pytest.approx(FIX_SAVED_S, rel=0.1)
    assert card.cost_s == pytest.approx(CALLBACK_S, rel=0.1)
    assert evidence.runs_per_step == 976 and evidence.ops_per_step == 22_988
    assert evidence.op_compiles == 202 and evidence.op_compile_s == pytest.approx(14.46, abs=0.01)
    assert card.fix.startswith("Make the callback's arguments numpy arrays")
    assert "which the program waits for" in card.title


def test_the_callbacks_compiles_are_its_own_not_setup_run_op_by_op(ppo) -> None:
    """The compile card counts the callback's 202 compiles apart and points at its card; no
    op-by-op card (the program ran 2 ops outside jit, making its key)."""
    (card,) = [f for f in ppo.findings if f.rule == "compile_time"]
    assert "202 ops run by host callbacks 14.5 s" in card.title
    assert "Jit the setup" not in card.fix and "are a host callback's" in card.fix
    assert card.location.endswith("rl/ppo.py:297")  # the step's compile, 16.4 s, the costliest
    assert [f for f in ppo.findings if f.rule == "op_by_op"] == []
    assert {f.rule for f in ppo.findings} == {"compile_time", "host_callback"}
