"""Equinox's own example notebooks on a real TPU v5e (JAX 0.10.2, Equinox 0.13.8), run as
programs (tests/tpu/programs/eqx_examples.py) under `tpuscope run` in the default mode
(`tests/tpu/chip_equinox.sh 4`, session 39), with their truth measured bare on the same chip
by bare_trace.py's clock (the median time between the programs' own prints; parts 1-3):

- eqx_vit: docs/examples/vision_transformer.ipynb (6 blocks, width 512, 8 heads of 64, batch
  64, f32, an `eqx.filter_jit` step), CIFAR-10 replaced by numpy arrays of its shape, 1,000
  steps, then its test loop (156 batches of the model run un-jitted). Bare: 27.1485 ms a step.
  Its keys twin (the step's 64 dropout keys split in one call, not split into a list of 65 and
  stacked back with `jnp.array`) 12.3269 ms: those 73 ops a step cost 14.82 ms. Without
  filter_jit's wait for each call (vit_nowait.py) 27.5759 ms; both fixes 11.9388 ms. The test
  loop took about 38 s of the bare run (154.86 s with it against 101.85 s for the keys twin
  with one test batch, less the keys' 14.8 s). Under tpuscope its hooks' time a step reads 3.08
  ms: this run's collector charged the after-the-loop step's hook time to the loop's last step
  (fixed after it; the first run, before the split, read 1.35 ms).
- eqx_rnn: docs/examples/train_rnn.ipynb (a GRU over `lax.scan`, batches of 32 from a numpy-style
  loader indexing device arrays, `loss.item()` and a print each step), 2,000 steps. Bare:
  4.8207 ms a step; without the `.item()` and print 4.3006 ms (0.5201 ms); with the loader over
  numpy copies of its arrays 1.8062 ms (3.01 ms); the device busy 64.8 us a step.
"""

from __future__ import annotations

import pytest

from tests.chip_runs import analysed

KEYS_SAVED_MS = 27.1485 - 12.3269  # bare: the keys split in one call
ITEM_SAVED_MS = 4.8207 - 4.3006  # bare: no `.item()` a step


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {
        name: report
        for name, (report, _) in analysed(tmp_path_factory, "eqx_vit", "eqx_rnn").items()
    }


def _card(analysis, rule: str):
    [card] = [f for f in analysis.findings if f.rule == rule]
    return card


def test_the_test_loop_after_training_is_after_the_loop_not_its_last_step(runs) -> None:
    """tail.py: the 156 test batches, 64,583 ops outside jit and 71 compiles, are the
    after-the-loop step; the loop's ops a step are the keys' 73, not 138 as before."""
    vit = runs["eqx_vit"]
    after = vit.summary.after_loop
    assert after is not None and after.compiles == 71 and after.wall_s > 50
    assert vit.summary.steps == 1000
    card = _card(vit, "op_by_op")
    assert card.title == "73 ops per step dispatched one by one outside jit from vit.py:286"
    assert card.evidence.dispatches_per_step == pytest.approx(73, abs=0.5)


def test_the_keys_card_points_into_the_jitted_step_and_bounds_its_saving(runs) -> None:
    """The step is already jitted (eqx.filter_jit, defined in Equinox's _jit.py): the fix says
    where the ops go, not "put the step under jax.jit". The saving measured bare (14.82 ms)
    lies between the time inside the dispatches and the device's idle time."""
    card = _card(runs["eqx_vit"], "op_by_op")
    assert card.fix.startswith("Each step already calls the compiled step_model")
    assert "jax.random.split(key, n)" in card.fix
    inside_ms = card.evidence.eager_dispatch_s / card.step_count * 1e3
    idle_ms = card.evidence.device_idle_s_per_step * 1e3
    assert inside_ms < KEYS_SAVED_MS < idle_ms
    assert "10.75 ms a step" in card.detail
    # the dispatches' own time is the cost (a floor: 0.73 of the saving), the idle time the
    # bound; their 0.44 of the idle time is the dispatching the device waited for: no idle card
    assert card.cost_s == pytest.approx(inside_ms * card.step_count / 1e3)
    assert not [f for f in runs["eqx_vit"].findings if "device idle" in f.title]


def test_the_test_loops_compiles_are_said_to_run_after_the_loop(runs) -> None:
    """71 of the 108 ops compiled outside jit (13.0 of 22.8 s) were the test loop's."""
    card = _card(runs["eqx_vit"], "compile_time")
    assert "(71 compiles, 13.0 s) ran after the loop, outside `jit`" in card.fix
    # the model's own init ran op by op before the loop: that is setup to jit
    assert "Jit the setup that runs op by op at vit.py:136, vit.py:96, vit.py:191" in card.fix


def test_the_rnns_read_costs_what_dropping_it_saved(runs) -> None:
    """The host_sync card's measured loss a step is within 10% of the bare twin's saving; its
    step is Equinox's filter_jit, which waits for each call itself (equinox/_jit.py:271)."""
    rnn = runs["eqx_rnn"]
    card = _card(rnn, "host_sync")
    lost_ms = card.evidence.read_lost_s_per_step * 1e3
    assert lost_ms == pytest.approx(ITEM_SAVED_MS, rel=0.1)
    assert "inside equinox/_jit.py:271" in card.title
    assert "`eqx.filter_jit` waits for each call's result itself (equinox/_jit.py:271" in card.fix
    assert rnn.summary.after_loop is not None and rnn.summary.after_loop.compiles == 10


def test_the_rnn_is_host_bound_in_its_loader(runs) -> None:
    """The device is busy 65 us of a 5 ms step; the host's time goes to the loader, whose
    indexing of device arrays is the measured 3.01 ms."""
    [idle] = [f for f in runs["eqx_rnn"].findings if f.title.startswith("device idle")]
    assert idle.severity == "high" and idle.location.endswith("train_rnn.py:11")
    assert "dataloader (train_rnn.py:11)" in idle.detail


def test_the_rnn_loader_is_named_for_the_ops_it_launches(runs) -> None:
    """The RNN's loader indexes the device arrays `get_data` returns: 39% of its traced time is
    inside the dispatches of the index ops, which the fix names with numpy copies as the way
    out; bare, its loader over numpy copies took the step from 4.82 to 1.81 ms."""
    (idle,) = [f for f in runs["eqx_rnn"].findings if "device idle" in f.title]
    assert "dataloader (train_rnn.py:11) held 78% of the host's traced time, 39% of it" in idle.fix
    assert "np.asarray(array)" in idle.fix
