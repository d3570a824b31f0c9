"""JAX beyond jit: pmapped steps and their compiles, sharding-only retraces, a framework's loop.

Real JAX on the CPU, in this process (tpuscope.profile()): a pmapped step over the host's
devices (one here, which is enough: `flax.jax_utils.replicate` still puts the state on a mesh
of its own, so the second call compiles the same program again); JAX's cache-miss text for a
sharding change, parsed; the advice it gets; and the step rule for a loop a library owns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax_utils = pytest.importorskip("flax.jax_utils")

import tpuscope  # noqa: E402
from tpuscope.collect.jax.explain import INPUT_SHARDING, INPUT_TYPES, parse_explanation  # noqa: E402
from tpuscope.detect import jax_advice  # noqa: E402

# JAX 0.10.2's message when only the mesh of the inputs changed (corpus_jax_sharding.py)
SHARDED = (
    "TRACING CACHE MISS at /w/t.py:68:17 (train):\n  for update defined at /w/t.py:59\n"
    "  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n"
    "  * at params[0][0], now f32[64,128@model]({Explicit: ('batch', 'model')}) and before "
    "f32[64,128]({Explicit: ('batch',)})\n"
    "  * at batch[0], now f32[16@batch,64]({Explicit: ('batch', 'model')}) and before "
    "f32[32@batch,64]({Explicit: ('batch',)})"
)


def test_a_sharding_only_difference_is_its_own_kind() -> None:
    expl = parse_explanation(SHARDED)
    assert expl is not None
    sharding, types = expl.diffs
    assert (sharding.kind, sharding.arg) == (INPUT_SHARDING, "params[0][0]")
    assert types.kind == INPUT_TYPES  # the batch's shape changed too (32 -> 16): a shape change


def test_sharding_advice_names_the_sharding_not_a_dtype() -> None:
    diffs = [
        {
            "kind": INPUT_SHARDING,
            "arg": "params[0][0]",
            "before": "f32[64,128]({Explicit: ('batch',)})",
            "after": "f32[64,128@model]({Explicit: ('batch', 'model')})",
        }
    ]
    fix = jax_advice.fix_for("update", diffs)
    assert (
        "sharding" in fix and "params[0][0]" in fix and "cast" not in fix and "dtype (" not in fix
    )
    old_run = [{**diffs[0], "kind": INPUT_TYPES}]  # stored before the collector told them apart
    assert jax_advice.fix_for("update", old_run) == fix
    weak = [
        {
            "kind": INPUT_TYPES,
            "arg": "s",
            "before": "f32[]{weak_type=False}",
            "after": "f32[]{weak_type=True}",
        }
    ]
    assert "cast it" in jax_advice.fix_for("g", weak)  # a dtype / weak-type change keeps its advice


def _p_step(w: jax.Array, x: jax.Array) -> jax.Array:
    return w - 0.1 * jax.lax.pmean(jnp.mean(x) * w, axis_name="batch")


def test_pmapped_steps_and_the_compile_its_new_input_sharding_costs(tmp_path: Path) -> None:
    devices = jax.local_device_count()
    with tpuscope.profile(store=tmp_path, name="pmap", warmup=1, analyze_at_exit=False) as run:
        p_step = jax.pmap(_p_step, axis_name="batch")
        w = jax_utils.replicate(jnp.ones(4))
        for _ in range(4):
            w = p_step(w, np.ones((devices, 8), np.float32))
        float(w[0, 0])
    run = tpuscope.load_run(run.path)
    # the read after the loop compiles its indexing: the after-the-loop step (tail.py)
    assert list(run.steps.sort_values("step")["boundary"]) == ["pmap:_p_step"] * 4 + ["end"]
    assert run.meta["processes"][0]["jax_step_source"].startswith("calls of pmapped _p_step (")
    compiles = run.compiles[run.compiles["function"] == "_p_step"]
    assert (
        len(compiles) == 2 and not compiles["eager"].any()
    )  # JAX's jit(_fun), the user's function
    assert compiles["graph_hash"].nunique() == 1  # the same program, compiled again
    retraces = run.retraces[run.retraces["compile_index"] == compiles["index"].max()]
    assert set(retraces["kind"]) == {INPUT_SHARDING} and set(retraces["arg"]) == {"w"}
    assert (
        "_device_put_sharded" in retraces["before"].iloc[0]
        and "'batch'" in retraces["after"].iloc[0]
    )
    assert run.steps["transfers_from_device"].sum() == 1  # float(w[0, 0])


def test_a_library_jit_is_the_step_only_when_the_program_jits_nothing_of_its_own(
    tmp_path: Path,
) -> None:
    """Keras's fit: the program's loop calls the library's jitted train_step; once the program
    jits a function of its own, library calls never make steps."""
    from tpuscope.collect.jax.collector import JaxCollector
    from tpuscope.collect.jax.sink import JitTarget
    from tpuscope.collect.session import Session
    from tpuscope.store import RunStore

    def steps_of(calls: list[JitTarget], user_jits: bool, name: str) -> list[str]:
        session = Session(RunStore(tmp_path).new_run(name)).start(install_handlers=False)
        collector = JaxCollector(session)
        collector.user_jits = user_jits
        for target in calls:
            collector.on_jit_call(target)
        collector.finish()
        session.close()
        return list(tpuscope.load_run(session.run_dir).steps["boundary"])

    keras = JitTarget("train_step", "/site-packages/keras/src/backend/jax/trainer.py:123", False)
    assert steps_of([keras] * 5, False, "fit") == ["jit:train_step"] * 5
    assert steps_of([keras] * 5, True, "own") == ["end"]


def test_jax_s_spmd_example_retraces_get_their_own_fixes(tmp_path: Path) -> None:
    """jax-ml/jax examples/spmd_mnist_classifier_fromscratch.py's idiom, on the host's device:
    the step (`@jax.jit(donate_argnums=0)`) called inside `jax.set_mesh(mesh)` in its loop and
    once outside it after the epoch, and one jitted `accuracy` over the train set and the test
    set, both sharded over the mesh's batch axis. The mesh context gets a mesh fix; the
    sharded sizes (`f32[60@batch,8] -> f32[10@batch,8]`) a shape fix, not "the same dtype"."""
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from tpuscope.detect.run_analysis import analyze
    from tpuscope.store import Run

    mesh = jax.make_mesh((1,), ("batch",), axis_types=(AxisType.Explicit,))
    data = NamedSharding(mesh, P("batch"))

    @jax.jit(donate_argnums=0)
    def train_step(w: jax.Array, x: jax.Array) -> jax.Array:
        return w - 0.1 * jnp.mean(x @ w)

    @jax.jit
    def accuracy(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.mean(x @ w)

    train = jax.device_put(np.ones((60, 8), np.float32), data)
    test = jax.device_put(np.ones((10, 8), np.float32), data)
    with tpuscope.profile(store=tmp_path, name="spmd", warmup=1, analyze_at_exit=False) as run:
        w = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, P()))
        for _ in range(6):
            with jax.set_mesh(mesh):
                w = train_step(w, train[:8])
        float(accuracy(w, train)), float(accuracy(w, test))
        w = train_step(w, train[:8])
        float(w[0, 0])
    fixes = {
        f.location.rsplit(":", 1)[-1]: f.fix
        for f in analyze(Run(run.path)).findings
        if f.rule == "recompile"
    }
    mesh_fix = next(fix for fix in fixes.values() if "train_step" in fix)
    assert "jax.set_mesh(mesh)" in mesh_fix and "AbstractMesh" in mesh_fix
    shape_fix = next(fix for fix in fixes.values() if "accuracy" in fix)
    assert shape_fix.startswith("Give ") and "same dtype" not in shape_fix


def _unreplicated_step(state: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    grad = jax.lax.pmean(jnp.mean(x) * state, axis_name="batch")
    return state - 0.1 * grad, jnp.sum(x)


def test_flax_imagenet_s_unreplicated_state_recompiles_until_placed(tmp_path: Path) -> None:
    """google/flax examples/imagenet's idiom (on the v5e: a 31.8 s recompile of ResNet-50's
    step at step 1): the state comes from a jitted init on one device and goes through
    `jax.pmap(..., in_axes=(None, 0), out_axes=(None, 0))`, which returns it on a mesh of its
    own, so step 1 compiles the step again. The card's fix, placing the state once with that
    sharding before the loop, is what removes it. Each run pmaps a function of its own, or the
    second would find the first's executables in JAX's cache."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from tpuscope.detect.run_analysis import analyze

    def train(name: str, placed: bool) -> Any:
        with tpuscope.profile(store=tmp_path, name=name, warmup=1, analyze_at_exit=False) as run:

            def body(state: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
                return _unreplicated_step(
                    state, x
                )  # a function of its own: JAX's cache is not shared

            step = jax.pmap(body, in_axes=(None, 0), out_axes=(None, 0), axis_name="batch")
            state = jax.jit(lambda: jnp.ones(4))()
            if placed:
                mesh = Mesh(jax.local_devices(), ("batch",))
                state = jax.device_put(state, NamedSharding(mesh, P()))
            batch = np.ones((jax.local_device_count(), 8), np.float32)
            for _ in range(4):
                state, _ = step(state, batch)
            float(state[0])
        return tpuscope.load_run(run.path)

    (card,) = [f for f in analyze(train("as_upstream", False)).findings if f.rule == "recompile"]
    assert "sharding" in card.fix and "jax.device_put(x, sharding)" in card.fix
    assert "SingleDeviceSharding" in card.detail and "NamedSharding(mesh {'batch'" in card.detail
    placed = train("placed", True)
    assert len(placed.compiles[placed.compiles["function"] == "body"]) == 1
    assert not [f for f in analyze(placed).findings if f.rule == "recompile"]
