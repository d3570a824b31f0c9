"""The JAX collector on real JAX (CPU), in-process runs under tpuscope.profile(): compiles with
cause/line/shapes, retraces as rows, steps from jit calls and StepTraceAnnotation, host syncs,
op-by-op dispatches, traces. The explanation parser: test_jax_explain.py; the whole path under
`tpuscope run` and the golden sample: test_jax_run.py.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import tpuscope  # noqa: E402
from tests.conftest import ROOT, run_tpuscope  # noqa: E402
from tpuscope.collect.jax.explain import (  # noqa: E402
    FIRST,
    INPUT_TYPES,
    PYTREE,
    STATIC_ARG,
)
from tpuscope.collect.trace_steps import ENV_TRACE_STEPS  # noqa: E402
from tpuscope.detect import RunTables  # noqa: E402
from tpuscope.detect.op_by_op import detect_op_by_op  # noqa: E402

HERE = Path(__file__).resolve()


def line_of(text: str) -> int:
    """1-based line number of the first line of this file containing text (after this function)."""
    lines = HERE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def line_of"))
    return next(i for i, line in enumerate(lines) if i > start + 3 and text in line) + 1


# -- in-process runs on real JAX ---------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def retrace_run(tmp_path_factory: pytest.TempPathFactory):
    """One profile() block: a jitted step with a short last batch, a static-arg and a
    pytree retrace, and a host sync; plus what the program's own logging saw."""
    from jax._src import monitoring

    store = tmp_path_factory.mktemp("jax_inproc")
    seen = _Records()
    logging.getLogger().addHandler(seen)
    listeners = len(monitoring.get_event_time_span_listeners())
    jit_before = jax.jit
    try:
        with tpuscope.profile(store=store, name="retrace", warmup=1) as run:

            @jax.jit
            def step(w, x):
                return w - 0.1 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)

            @partial(jax.jit, static_argnums=1)
            def scale(x, k):
                return x * k

            @jax.jit
            def total(tree):
                return sum(v.sum() for v in tree.values())

            w = jnp.ones((8, 4))
            for n in (16, 16, 16, 10):
                w = step(w, jnp.ones((n, 8)))  # the retrace line
            loss = float(w.sum())  # a host sync
            scale(w, 2), scale(w, 3)
            total({"a": w}), total({"a": w, "b": w})
    finally:
        logging.getLogger().removeHandler(seen)
    restored = {
        "jit": jax.jit is jit_before,
        "listeners": len(monitoring.get_event_time_span_listeners()) == listeners,
        "explain": not jax.config.jax_explain_cache_misses,
        "filters": not logging.getLogger("jax._src.interpreters.partial_eval").filters
        and not logging.getLogger("jax._src.interpreters.pxla").filters,
    }
    return tpuscope.load_run(run.path), seen.messages, restored, loss


def test_steps_are_calls_of_the_jitted_step(retrace_run) -> None:
    run, _, _, _ = retrace_run
    proc = run.meta["processes"][0]
    assert proc["backend"] == "jax" and proc["device_kind"] == "cpu" and proc["device_count"] >= 1
    assert proc["jax_step_source"].startswith("calls of jitted step (")
    steps = run.steps
    assert list(steps["boundary"][:4]) == ["jit:step"] * 4
    assert list(steps["step"]) == list(range(len(steps)))
    # the steps never overlap (collect/jax/ready.py): each starts where the previous one ended,
    # or later. A step's end is when its outputs were seen ready; on this CPU backend, under the
    # load of two pytest workers, step 1's were seen only after step 3's compile (walls 72, 94,
    # 0.06, 0 and 97 ms, twice in the suite), which leaves step 3 no length of its own
    assert (steps["start_ns"].iloc[1:].to_numpy() >= steps["end_ns"].iloc[:-1].to_numpy()).all()
    assert (steps["wall_ns"] >= 0).all() and steps["wall_ns"].sum() > 0
    assert int(steps["compiles"].iloc[3]) >= 1  # the short batch compiled again in step 3


def test_retrace_row_names_the_argument_the_line_and_the_shapes(retrace_run) -> None:
    run, _, _, _ = retrace_run
    compiles = run.compiles
    retrace = compiles[compiles["cause"].str.startswith("retrace of step")].iloc[0]
    assert retrace["cause"] == "retrace of step: arg x: f32[16,8] -> f32[10,8]"
    assert retrace["location"] == f"{HERE}:{line_of('# the retrace line')}"
    assert list(retrace["input_shapes"]) == ["f32[8,4]", "f32[10,8]"]
    assert retrace["step"] == 3 and retrace["duration_ns"] > 0 and retrace["num_inputs"] == 2
    first = compiles[compiles["cause"] == "first trace of step"].iloc[0]
    assert first["step"] == 0 and list(first["input_shapes"]) == ["f32[8,4]", "f32[16,8]"]
    assert first["graph_hash"] != retrace["graph_hash"]
    assert any(f"{HERE}:" in frame for frame in retrace["frames"])


def test_retraces_table_keeps_static_and_pytree_differences(retrace_run) -> None:
    run, _, _, _ = retrace_run
    rows = run.retraces
    by_kind = {kind: frame for kind, frame in rows.groupby("kind")}
    shape = by_kind[INPUT_TYPES].iloc[0]
    assert (shape["function"], shape["arg"], shape["before"], shape["after"]) == (
        "step",
        "x",
        "f32[16,8]",
        "f32[10,8]",
    )
    static = by_kind[STATIC_ARG].iloc[0]
    assert (static["function"], static["before"], static["after"]) == ("scale", "2", "3")
    tree = by_kind[PYTREE].iloc[0]
    assert tree["function"] == "total" and "2 children" in tree["after"]
    assert set(by_kind[FIRST]["function"]) >= {"step", "scale", "total"}
    assert rows["compile_index"].notna().all()


def test_host_sync_is_counted_at_its_line(retrace_run) -> None:
    run, _, _, loss = retrace_run
    assert loss == pytest.approx(float(loss))
    sites = run.call_sites
    float_sync = sites[(sites["kind"] == "host_sync") & (sites["name"] == "float")]
    assert list(float_sync["location"]) == [f"{HERE}:{line_of('# a host sync')}"]
    assert run.steps["transfers_from_device"].sum() >= 1


def test_program_output_and_jax_state_are_left_as_they_were(retrace_run) -> None:
    _, messages, restored, _ = retrace_run
    assert not [m for m in messages if "TRACING CACHE MISS" in m or "Compiling" in m]
    assert restored == {"jit": True, "listeners": True, "explain": True, "filters": True}


def test_users_own_explanations_still_reach_their_handlers(tmp_path: Path) -> None:
    seen = _Records()
    logging.getLogger().addHandler(seen)
    jax.config.update("jax_explain_cache_misses", True)
    try:
        with tpuscope.profile(store=tmp_path, name="own", analyze_at_exit=False) as run:
            f = jax.jit(lambda x: x + 1)
            f(jnp.ones(3)), f(jnp.ones(4))
    finally:
        jax.config.update("jax_explain_cache_misses", False)
        logging.getLogger().removeHandler(seen)
    run = tpuscope.load_run(run.path)
    assert run.meta["processes"][0]["jax_explain_cache_misses"] == "user setting"
    assert sum("TRACING CACHE MISS" in m for m in seen.messages) >= 2
    assert "retrace of <lambda>: arg x: f32[3] -> f32[4]" in set(run.compiles["cause"])


def test_op_by_op_loop_with_step_annotations_and_a_trace(tmp_path: Path, monkeypatch) -> None:
    """An un-jitted grad step marked with StepTraceAnnotation: steps come from the
    annotation, every primitive is counted, the op_by_op rule fires, steps 2..3 are traced."""
    monkeypatch.setenv(ENV_TRACE_STEPS, "2:4")

    def loss(w, x):
        return (jax.nn.relu(x @ w) ** 2).mean()

    with tpuscope.profile(store=tmp_path, name="eager", warmup=2, analyze_at_exit=False) as run:
        w, x = jnp.ones((8, 4)), jnp.ones((16, 8))
        for i in range(5):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                value, grad = jax.value_and_grad(loss)(w, x)
                w = w - 0.1 * grad
    run = tpuscope.load_run(run.path)
    proc = run.meta["processes"][0]
    assert proc["jax_step_source"] == "jax.profiler.StepTraceAnnotation"
    assert list(run.steps["boundary"]) == ["StepTraceAnnotation"] * 5
    eager = run.metrics[run.metrics["name"] == "jax.eager_dispatch_time"].set_index("step")
    assert (eager["count"] >= 10).all() and (eager["total"] > 0).all()
    assert proc["trace_steps"] == [2, 4]
    assert proc["trace_files"] and all(
        Path(f).is_file() and f.startswith(str(run.path / "trace")) for f in proc["trace_files"]
    )
    # the loop reads nothing: the window's own wait for the device is not the program's read
    assert not (run.call_sites["kind"] == "host_sync").any()
    [finding] = detect_op_by_op(RunTables.from_run(run))
    from tpuscope.analyze.judge import judged_steps, severity, wall_s

    assert (
        finding.rule == "op_by_op" and finding.cost_s > 0
    )  # severity: its share of the judged wall
    assert finding.severity == severity(finding.cost_s, wall_s(judged_steps(run.steps, 2)))
    assert finding.step_runs == [[2, 4]] and finding.step_count == 3
    assert finding.location.startswith(f"{HERE}:")
    assert finding.evidence["jit_calls_per_step"] == 0
    assert "jax.jit" in finding.fix


def test_no_op_by_op_finding_on_a_jitted_loop(retrace_run) -> None:
    run, _, _, _ = retrace_run
    assert detect_op_by_op(RunTables.from_run(run)) == []


def test_step_function_is_the_most_called_jitted_function(tmp_path: Path) -> None:
    """Eval steps first, then training: steps follow eval_step until train_step overtakes it."""
    from tpuscope.collect.jax.collector import JaxCollector
    from tpuscope.collect.jax.sink import JitTarget
    from tpuscope.collect.session import Session
    from tpuscope.store import RunStore

    session = Session(RunStore(tmp_path).new_run("switch")).start(install_handlers=False)
    collector = JaxCollector(session)  # not installed: driven directly, as the hooks would
    evaluate = JitTarget("eval_step", "/w/t.py:1", True)
    train = JitTarget("train_step", "/w/t.py:5", True)
    library = JitTarget("init", "/site-packages/flax/core.py:9", False)
    for target in [library, evaluate, evaluate, train, train, train, train]:
        collector.on_jit_call(target)
    collector.finish()
    session.close()
    steps = tpuscope.load_run(session.run_dir).steps
    # init and the 1st eval call are in step 0; train_step takes over at its 3rd call, when
    # it has been called more often than eval_step
    assert list(steps["boundary"]) == ["jit:eval_step"] * 2 + ["jit:train_step"] * 2
    assert list(steps["executions"]) == [2, 3, 1, 1]
    assert session.proc_meta["jax_step_source"] == "calls of jitted train_step (/w/t.py:5)"


def test_an_unjitted_optax_loop_has_one_step_an_update(tmp_path: Path) -> None:
    """The chip corpus's Adam MLP left un-jitted (`mlp_train.py --eager`, a user who forgot
    `jax.jit`): the only jitted calls are optax's `tree_bias_correction`, twice an update from
    two lines of optax. Its steps are the calls from one of them: one step an update, not two
    (on the v5e: 80 half steps of 40, a p50 of 5.7 ms where the step took 43 ms)."""
    program = ROOT / "tests" / "tpu" / "programs" / "mlp_train.py"
    args = ("--eager", "--widths", "32,64,8", "--batch", "16", "--steps", "14")
    done = run_tpuscope(
        "run",
        "--store",
        str(tmp_path),
        "--name",
        "eager",
        "python3",
        str(program),
        *args,
        env={"JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [path] = [p for p in tmp_path.iterdir() if p.name.startswith("eager-")]
    run = tpuscope.load_run(path)
    source = run.meta["processes"][0]["jax_step_source"]
    assert source.startswith("calls of jitted tree_bias_correction"), source
    assert len(run.steps) == 14  # from the first update's call to the end: one step an update
    [finding] = detect_op_by_op(RunTables.from_run(run))
    assert finding.evidence["jit_calls_per_step"] == pytest.approx(2.0, abs=0.2)
    assert finding.evidence["cost_basis"] == "host dispatch time"  # no device trace on the CPU


def test_a_jitted_loop_leaves_nothing_per_step_for_the_garbage_collector(tmp_path: Path) -> None:
    """Until the flush, a profiled step keeps no object Python's collector tracks (rows.py):
    2-4 per step made a profiled loop collect every ~175 steps and now and then scan all of
    JAX's heap, where the bare loop never collects. Its rows are all still written."""
    import gc

    steps = 3000
    with tpuscope.profile(store=tmp_path, name="jax-gc", warmup=1) as run:
        step = jax.jit(lambda x: (x * 0.5, jnp.sum(x)))
        x = jnp.ones(8)
        for _ in range(20):  # compiled, caches warm
            x, loss = step(x)
            jax.block_until_ready(loss)
        before = len(gc.get_objects())
        for _ in range(steps):
            x, loss = step(x)
            float(loss)
        grown = len(gc.get_objects()) - before
    assert grown < steps / 10, f"{grown} more tracked objects after {steps} steps"
    recorded = tpuscope.load_run(run.path)
    assert len(recorded.steps) >= steps
    floats = recorded.metrics[recorded.metrics["name"] == "jax.host_syncs/float"]
    assert floats["count"].sum() == steps
    assert (recorded.call_sites["kind"] == "host_sync").sum() >= steps


def test_a_program_that_only_imports_jax_is_not_labelled_jax(tmp_path: Path) -> None:
    """Issue 29: the backend is the one whose work ran. A pytest run whose plugins import jax
    (here: a program that imports it and runs nothing on it) has no JAX backend label."""
    proc = run_tpuscope(
        "run", "--store", str(tmp_path), "--quiet", "python", "-c", "import jax; print('ok')"
    )
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    [run_dir] = [p for p in tmp_path.iterdir() if (p / "meta.json").exists()]
    assert all(not p.get("backend") for p in tpuscope.load_run(run_dir).meta["processes"])


def test_work_after_the_loop_is_not_the_last_steps(tmp_path: Path) -> None:
    """tail.py: the loop's last step ends where the program first compiles something other
    than the step function; the rest (an evaluation outside jit) is the after-the-loop step,
    with its compiles and call sites. A compile inside the loop (an evaluation at step 5)
    stays in its step. On a v5e Equinox's ViT example's test loop, 156 batches op by op, was
    a 52 s last step whose eager ops made the loop's 73 a step read as 138."""

    with tpuscope.profile(store=tmp_path, name="tail", warmup=1) as run:
        step = jax.jit(lambda x: x * 0.5 + 1.0)
        x = jnp.ones(8)
        for i in range(10):
            x = step(x)
            if i == 5:
                float(jnp.cos(x[:3]).sum())  # an evaluation inside the loop: it compiles
        jax.block_until_ready(x)
        for _ in range(3):  # the evaluation after the loop, op by op
            float(jnp.tanh(x[:5] * 2.0).sum())
            time.sleep(0.1)
        report = jax.jit(lambda v: jax.debug.print("final {v}", v=v.sum()))
        report(x)  # a host callback after the loop
        jax.effects_barrier()
    recorded = tpuscope.load_run(run.path)
    steps = recorded.steps.sort_values("step")
    assert list(steps["boundary"])[-1] == "end", list(steps["boundary"])
    loop = steps[steps["boundary"] == "jit:<lambda>"]
    # the last call's step holds no evaluation (the 0.3 s of sleeps between its ops)
    assert len(loop) == 10 and loop["wall_ns"].iloc[-1] < 0.25e9, list(loop["wall_ns"])
    after = int(steps["step"].iloc[-1])
    compiles = recorded.compiles
    evaluation = compiles[compiles["time_ns"] > steps["start_ns"].iloc[-1]]
    assert set(evaluation["step"]) == {after} and len(evaluation) >= 2
    inside = int(loop["step"].iloc[5])  # the step the 6th call opened
    assert (compiles["step"] == inside).sum() >= 1  # the loop's own evaluation stays there
    sites = recorded.call_sites[recorded.call_sites["kind"] == "eager_dispatch"]
    tanh_line = f"{HERE}:{line_of('float(jnp.tanh(x[:5]')}"
    assert set(sites[sites["location"] == tanh_line]["step"]) == {after}
    compile_times = recorded.metrics[recorded.metrics["name"] == "jax.backend_compile_time"]
    assert int(loop["step"].iloc[-1]) not in set(compile_times["step"])  # they went with it
    callbacks = recorded.call_sites[recorded.call_sites["kind"] == "host_callback"]
    assert set(callbacks["step"]) == {after}, callbacks
    assert steps["wall_ns"].iloc[-1] >= 0.3e9  # its three sleeps


def _compile_of(function: str) -> Any:
    from tpuscope.collect.jax.compiles import CompileEvent

    return CompileEvent(
        module=f"jit_{function}",
        function=function,
        start_s=time.time(),
        trace_s=0.0,
        lower_s=0.0,
        compile_s=0.01,
        input_shapes=None,
        location="/w/t.py:9",
        frames=[],
        explanation=None,
        explanations=[],
    )


@pytest.mark.parametrize("goes_on", [False, True])
def test_a_marked_last_step_keeps_the_loops_hook_time_apart(tmp_path: Path, goes_on: bool) -> None:
    """tail.py, driven as the hooks would: after 5 calls of train_step, a compile of evaluate
    marks the open step. Where the run ends there, what followed the mark (its compile, 50 ms
    of hooks) is the after-the-loop step, charged apart as a step that compiled, not to the
    loop's hook time a step; where train_step is called again, the step is one again."""
    from tpuscope.collect.jax.collector import JaxCollector
    from tpuscope.collect.jax.sink import JitTarget
    from tpuscope.collect.session import Session
    from tpuscope.store import RunStore

    session = Session(RunStore(tmp_path).new_run("tail")).start(install_handlers=False)
    collector = JaxCollector(session)  # not installed: driven directly
    train = JitTarget("train_step", "/w/t.py:5", True)
    for _ in range(5):
        collector.on_jit_call(train)
        collector.charge(100_000)
    collector._on_compile(_compile_of("evaluate"))
    collector.charge(50_000_000)
    if goes_on:
        collector.on_jit_call(train)
    collector.finish()
    session.close()
    run = tpuscope.load_run(session.run_dir)
    boundaries = list(run.steps.sort_values("step")["boundary"])
    cost = session.cost
    [compiled] = list(run.compiles["step"])
    if goes_on:
        assert "end" not in boundaries
        assert compiled == run.steps["step"].max() - 1  # the marked step's, counted once
    else:
        assert boundaries[-1] == "end" and compiled == run.steps["step"].max()
        assert cost.compile_hook_ns >= 50_000_000 > cost.hook_ns
