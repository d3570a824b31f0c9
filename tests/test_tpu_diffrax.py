"""patrick-kidger/diffrax's neural ODE example on a real TPU v5e (JAX 0.10.2, diffrax 0.7.2,
equinox 0.13.8), upstream's notebook as a program (tests/tpu/programs/diffrax_examples.py),
run under `tpuscope run` in the default mode (`tests/tpu/chip_diffrax.sh 1`, session 42):
tests/tpu/runs/dfx_node, read by this round's code.

Truth, bare on the same chip (part 1: its prints every 100 steps timed by bare_trace.py, and
JAX's compile log): 87.39 s a run. The twin whose learnt scale has its dtype
(`jnp.array(1.0, dtype=jnp.float32)`) 73.01 s: upstream's weakly typed scale compiled the step
again at step 1 (tracing 6.87 s, lowering 0.72 s, XLA 6.31 s), its first 100 steps 14.80 s
against the twin's 0.89 s: 13.91 s. Its first phase (10% of each series) steps at 8.5-9.0 ms
(gaps of 0.85-0.90 s a 100 steps in both), its second (whole series) at 24-28 ms.

Main's code on the chip called both step recompiles one card whose title named the second
phase's length and whose fix the weak type ("a Python scalar is weakly typed, an array is not":
`jnp.array(1.0)` is an array, and weakly typed); it took the idle share measured in the first
phase's traced steps against the whole run's median step (20.15 ms: "device idle 89%", 17.9 s);
and it said the model's one solve after the loop, to plot it, was "still recurring: about 1000
recompiles per 1,000 steps".
"""

from __future__ import annotations

import pytest

from tests.chip_runs import analysed
from tpuscope.analyze.compare import finding_key
from tpuscope.detect.pod import _key as pod_key

RECOMPILE_S = 14.8013 - 0.8912  # the first 100 steps, upstream against the twin
PHASE_ONE_STEP_S = (0.8461, 0.9016)  # the fastest and slowest 100 steps of phase 1, bare


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    return analysed(tmp_path_factory, "dfx_node")["dfx_node"][0]


def _cards(report, rule: str) -> list:
    return [f for f in report.findings if f.rule == rule]


def test_the_weak_scale_is_a_card_costing_what_the_twin_saves(report) -> None:
    (weak,) = [f for f in _cards(report, "recompile") if "weak type" in f.title]
    assert weak.severity == "high" and weak.location.endswith("neural_ode.py:139")
    assert [list(r) for r in weak.step_runs] == [[1, 1]]
    assert weak.cost_s == pytest.approx(RECOMPILE_S, rel=0.10)
    assert "jnp.array(1.0, dtype=jnp.float32)" in weak.fix and "pad" not in weak.fix


def test_the_second_phase_is_its_own_card_without_the_weak_fix(report) -> None:
    """Two cards at one site: a pod's hosts and two runs' comparison keep them apart."""
    (phase,) = [f for f in _cards(report, "recompile") if "took 2 sizes" in f.title]
    (weak,) = [f for f in _cards(report, "recompile") if "weak type" in f.title]
    assert [list(r) for r in phase.step_runs] == [[500, 500]] and "(10, 100)" in phase.detail
    assert "If the size changed on purpose" in phase.fix and "weak" not in phase.fix
    assert finding_key(phase) != finding_key(weak) and pod_key(phase) != pod_key(weak)


def test_the_solve_after_the_loop_is_once(report) -> None:
    (after,) = [f for f in _cards(report, "recompile") if "diffeqsolve" in f.title]
    assert after.severity == "low" and "made after the loop's last step" in after.detail
    assert "recurring" not in after.detail


def test_the_idle_share_is_the_traced_phases_own(report) -> None:
    """Steps 3-7 were traced, in the first phase: the device busy 2.20 ms a step. The idle
    share is taken against that phase's median step (the steps between the step's compiles at
    steps 1 and 500), within the bare phase's 8.5-9.0 ms, not the whole run's 20.15 ms."""
    (idle,) = [f for f in _cards(report, "tensorcore_underuse") if "idle" in f.title]
    assert "device idle 74%" in idle.title and "steps 2-499" in idle.detail
    step_s = 1e-3 * float(idle.detail.split(" ms median step")[0].rsplit(" ", 1)[1])
    assert PHASE_ONE_STEP_S[0] / 100 * 0.98 <= step_s <= PHASE_ONE_STEP_S[1] / 100
    assert idle.cost_s == pytest.approx((step_s - 2.20e-3) * 498, rel=0.02)


@pytest.fixture(scope="module")
def diffusion(tmp_path_factory: pytest.TempPathFactory):
    """Equinox's score-based diffusion example (tests/tpu/programs/eqx_examples.py: an
    MLP-Mixer of hidden 64, f32, batch 256 indexed out of a device array, `eqx.filter_jit`,
    `value.item()` each step; 1,500 steps, `chip_diffrax.sh 3`): tests/tpu/runs/eqx_sbd. Bare
    on the chip 7.64 ms a step (the median of its 100-step spans), 70.93 s a run; under
    tpuscope 8.17 ms (p50), 78.51 s."""
    return analysed(tmp_path_factory, "eqx_sbd")["eqx_sbd"][0]


def test_a_long_compile_of_one_op_is_not_told_to_be_jitted(diffusion) -> None:
    """Its loader's `jr.permutation` of 60,000 indices compiled 13.1 s on the v5e, one op:
    jitting it alone compiles the same sort, so the setup advice leaves that line out and says
    what keeps it (the persistent cache) instead."""
    (card,) = _cards(diffusion, "compile_time")
    jit_setup = card.fix.split("Jit the setup that runs op by op at ", 1)[1].split(":", 1)[0]
    assert "score_based_diffusion.py:157" not in jit_setup
    assert "at score_based_diffusion.py:157 (_shuffle) 13.1 s: jitting it alone" in card.fix


def test_the_diffusion_step_is_host_bound_as_bare(diffusion) -> None:
    """The device busy 1.82 ms of a step the program takes 7.64 ms for bare."""
    (idle,) = [f for f in _cards(diffusion, "tensorcore_underuse") if "idle" in f.title]
    assert idle.severity == "high" and "dataloader" in idle.fix
    step_s = 1e-3 * float(idle.detail.split(" ms median step")[0].rsplit(" ", 1)[1])
    assert step_s == pytest.approx(7.64e-3, rel=0.10)


def test_its_loader_is_named_for_the_ops_it_launches(diffusion) -> None:
    """The loader indexes the device array of the data with a device permutation: 45% of its
    traced time is inside the dispatches of those index ops, which the fix names, with numpy
    copies as the way out. Its twin over a numpy copy and a numpy permutation (`chip_diffrax.sh
    4`) stepped at 6.98 ms bare against 7.64 (the median of its 100-step spans)."""
    (idle,) = [f for f in _cards(diffusion, "tensorcore_underuse") if "idle" in f.title]
    assert "dataloader (score_based_diffusion.py:152) held 55% of the host's traced time, 45% " in (
        idle.fix
    )
    assert "dynamic_slice" in idle.fix and "np.asarray(array)" in idle.fix


def test_the_numpy_loader_twin_is_not_told_about_dispatches(tmp_path_factory) -> None:
    """The twin (tests/tpu/runs/eqx_sbd_numpy): its loader launches nothing (0 of its traced
    time in dispatches), so its part of the host-bound fix is the generic one; the device is
    still idle 83% of its 7.16 ms p50 step (6.98 ms bare): the step's own dispatch and the
    `.item()` remain."""
    report = analysed(tmp_path_factory, "eqx_sbd_numpy")["eqx_sbd_numpy"][0]
    (idle,) = [f for f in _cards(report, "tensorcore_underuse") if "idle" in f.title]
    assert "dataloader (score_based_diffusion_numpy.py:154)" in idle.fix
    assert "dispatches of ops outside jit" not in idle.fix
