"""The JAX collector on real JAX (CPU): compiles with cause/line/shapes, retraces as rows,
steps from jit calls and StepTraceAnnotation, host syncs, op-by-op dispatches, traces.

In-process runs use tpuscope.profile(); one `tpuscope run` of examples/jax_train.py
checks the whole path (sitecustomize -> post-import hook -> store -> report).
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import tpuscope  # noqa: E402
from tests.conftest import ROOT, run_tpuscope  # noqa: E402
from tpuscope.collect.jax.explain import (  # noqa: E402
    DEBUG_INFO,
    FIRST,
    INPUT_TYPES,
    PYTREE,
    REDEFINED,
    STATIC_ARG,
    TRACING_CONTEXT,
    cause_text,
    parse_explanation,
)
from tpuscope.collect.trace_steps import ENV_TRACE_STEPS, parse_window  # noqa: E402
from tpuscope.detect import RunTables  # noqa: E402
from tpuscope.detect.op_by_op import detect_op_by_op  # noqa: E402

HERE = Path(__file__).resolve()


def line_of(text: str) -> int:
    """1-based line number of the first line of this file containing text (after this function)."""
    lines = HERE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def line_of"))
    return next(i for i, line in enumerate(lines) if i > start + 3 and text in line) + 1


# -- the explanation parser, on messages exactly as JAX 0.10.2 logs them ------------------

NEVER = ("TRACING CACHE MISS at /w/train.py:27 (<module>):\n  never seen function:\n"
         "    f id=140660422161760 defined at /w/train.py:17")
REDEF = NEVER + ("\n  but seen another function defined on the same line; maybe the function is\n"
                 "  being re-defined repeatedly, preventing caching?")
TYPES = ("TRACING CACHE MISS at /w/train.py:31 (<module>):\n  for f defined at /w/train.py:17\n"
         "  all previously seen cache keys differ. For the closest previous key:\n"
         "  different input types:\n  * at x, now f32[5,8] and before f32[4,8]\n"
         "  * at batch['y'], now i32[5] and before i32[4]")
WEAK = ("TRACING CACHE MISS at /w/t.py:3 (g):\n  for g defined at /w/t.py:1\n"
        "  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n"
        "  * at s, now f32[]{weak_type=True} and before f32[]{weak_type=False}"
        "https://docs.jax.dev/en/latest/type_promotion.html#weak-types")
STATIC = ("TRACING CACHE MISS at /w/train.py:35:10 (<module>):\n  for g defined at /w/train.py:21\n"
          "  all previously seen cache keys differ. For the closest previous key:\n  different input pytree:\n"
          "  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree metadata "
          "Static(val=3) and before <class 'jax._src.tree_util.Static'> with pytree metadata "
          "Static(val=2), so the pytree node metadata does not match")
TREE = ("TRACING CACHE MISS at /w/train.py:39:13 (<module>):\n  for h defined at /w/train.py:37\n"
        "  all previously seen cache keys differ. For the closest previous key:\n  different input pytree:\n"
        "  * at input path [0][0], now <class 'dict'> with 2 children and before <class 'dict'> with 1 "
        "child, so the numbers of children do not match, with the symmetric difference of key sets: {'b'}")
CONTEXT = ("TRACING CACHE MISS at /w/t.py:9 (<module>):\n  for f defined at /w/t.py:2\n"
           "  all previously seen cache keys differ. For the closest previous key:\n"
           "  Tracing context doesn't match, e.g. due to config or context manager.\n"
           "  * jax_enable_x64 differs: now True and before False")
DEBUG = ("TRACING CACHE MISS at /w/t.py:9 (<module>):\n  for f defined at /w/t.py:2\n"
         "  all previously seen cache keys differ. For the closest previous key:\n  Debug info doesn't match.")


def test_parse_first_and_redefined() -> None:
    first = parse_explanation(NEVER)
    assert (first.kind, first.function, first.defined_at, first.callsite) == (
        FIRST, "f", "/w/train.py:17", "/w/train.py:27")
    assert cause_text(first, "f") == "first trace of f"
    redefined = parse_explanation(REDEF)
    assert redefined.kind == REDEFINED
    assert "re-defined on every call" in cause_text(redefined, "f")


def test_parse_input_types_argument_by_argument() -> None:
    expl = parse_explanation(TYPES)
    assert expl.kind == INPUT_TYPES
    assert [(d.arg, d.before, d.after) for d in expl.diffs] == [
        ("x", "f32[4,8]", "f32[5,8]"), ("batch['y']", "i32[4]", "i32[5]")]
    assert cause_text(expl, "f") == "retrace of f: arg x: f32[4,8] -> f32[5,8]; arg batch['y']: i32[4] -> i32[5]"
    weak = parse_explanation(WEAK).diffs[0]
    assert (weak.before, weak.after) == ("f32[]{weak_type=False}", "f32[]{weak_type=True}")


def test_parse_static_pytree_context_debug() -> None:
    static = parse_explanation(STATIC)
    assert (static.kind, static.callsite) == (STATIC_ARG, "/w/train.py:35")
    assert [(d.arg, d.before, d.after) for d in static.diffs] == [("[0][1]", "2", "3")]
    assert cause_text(static, "g") == "retrace of g: static arg [0][1]: 2 -> 3"
    tree = parse_explanation(TREE).diffs[0]
    assert (tree.kind, tree.before, tree.after) == (PYTREE, "dict with 1 child", "dict with 2 children")
    assert "{'b'}" in tree.detail
    context = parse_explanation(CONTEXT).diffs
    assert [(d.kind, d.arg, d.before, d.after) for d in context] == [
        (TRACING_CONTEXT, "jax_enable_x64", "False", "True")]
    assert parse_explanation(DEBUG).kind == DEBUG_INFO
    assert parse_explanation("some other warning") is None


def test_trace_window_parsing() -> None:
    assert parse_window("10:20").start == 10 and 19 in parse_window("10:20") and 20 not in parse_window("10:20")
    assert (parse_window("5").start, parse_window("5").stop) == (5, 6)
    assert parse_window("") is None
    for bad in ("a:b", "5:5", "-1:3"):
        with pytest.raises(ValueError, match="trace steps"):
            parse_window(bad)


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
    assert (steps["wall_ns"] > 0).all()
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
    assert (shape["function"], shape["arg"], shape["before"], shape["after"]) == ("step", "x", "f32[16,8]", "f32[10,8]")
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
    assert proc["trace_files"] and all(Path(f).is_file() and f.startswith(str(run.path / "trace"))
                                       for f in proc["trace_files"])
    [finding] = detect_op_by_op(RunTables.from_run(run))
    from tpuscope.analyze.judge import judged_steps, severity, wall_s

    assert finding.rule == "op_by_op" and finding.cost_s > 0  # severity: its share of the judged wall
    assert finding.severity == severity(finding.cost_s, wall_s(judged_steps(run.steps, 2)))
    assert finding.step_runs == [[2, 4]] and finding.step_count == 3
    assert finding.location.startswith(f"{HERE}:")
    assert finding.evidence["jit_calls_per_step"] == 0
    assert "jax.jit" in finding.fix


def test_no_op_by_op_finding_on_a_jitted_loop(retrace_run) -> None:
    run, _, _, _ = retrace_run
    assert detect_op_by_op(RunTables.from_run(run)) == []


# -- the example, end to end through `tpuscope run` ----------------------------------------

def test_example_under_tpuscope_run_shows_the_retrace(example_run) -> None:
    pytest.importorskip("flax")
    run_dir, proc = example_run("jax_train.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "epoch 1: mean loss" in proc.stdout  # the program's own output is untouched
    run = tpuscope.load_run(run_dir)
    assert run.meta["processes"][0]["backend"] == "jax"
    steps = run.steps
    assert len(steps) == 14 and set(steps["boundary"]) == {"jit:train_step"}
    after_warmup = run.compiles[run.compiles["step"] >= 2]
    assert len(after_warmup) == 1
    retrace = after_warmup.iloc[0]
    assert retrace["step"] == 6
    assert retrace["cause"].startswith("retrace of train_step: arg batch['x']: f32[32,64] -> f32[8,64]")
    example = (ROOT / "examples" / "jax_train.py").read_text().splitlines()
    call = next(i + 1 for i, line in enumerate(example) if "= train_step(state, batch)" in line)
    assert retrace["location"] == f"{ROOT / 'examples' / 'jax_train.py'}:{call}"
    assert "f32[8,64]" in list(retrace["input_shapes"])
    shown = run_tpuscope("show", run_dir.name, "--store", str(run_dir.parent))
    assert shown.returncode == 0, shown.stderr
    assert "retrace of" in shown.stdout and "train_step" in shown.stdout


# -- the sample trace (golden) -------------------------------------------------------------

def test_sample_trace_jax_retrace_gives_its_expected_findings() -> None:
    import json

    from tpuscope.detect import detect

    folder = ROOT / "sample_traces" / "jax_retrace"
    expected = json.loads((folder / "expected_findings.json").read_text())
    run = tpuscope.load_run(folder)
    findings = detect(RunTables.from_run(run))
    rules = {f.rule for f in findings}
    for want in expected["findings"]:
        found = [f for f in findings if f.rule == want["rule"]]
        assert found, f"no {want['rule']} finding: {rules}"
        finding = found[0]
        assert finding.severity == want["severity"]
        assert (finding.location or "").endswith(want["location_endswith"])
        assert finding.step_runs == want["step_runs"]
        text = f"{finding.title} {finding.detail} {json.dumps(finding.evidence)}"
        assert all(piece in text for piece in want["text_contains"]), text
    assert rules <= {w["rule"] for w in expected["findings"]} | set(expected["allowed"])
    assert not rules & set(expected["absent"])
    tables = expected["tables"]
    assert len(run.steps) == tables["steps"]
    from tpuscope.analyze.families import graph_families, process_backends

    families = graph_families(run.compiles, process_backends(run.meta))
    assert int(families["recompile"].sum()) == tables["recompiles"]
    got = run.retraces.to_dict("records")
    for want in tables["retraces"]:
        assert any(all(row.get(k) == v for k, v in want.items()) for row in got), want


def test_step_function_is_the_most_called_jitted_function(tmp_path: Path) -> None:
    """Eval steps first, then training: steps follow eval_step until train_step overtakes it."""
    from tpuscope.collect.jax.collector import JaxCollector
    from tpuscope.collect.jax.hooks import JitTarget
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
    proc = run_tpuscope("run", "--store", str(tmp_path), "--quiet", "python", "-c", "import jax; print('ok')")
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    [run_dir] = [p for p in tmp_path.iterdir() if (p / "meta.json").exists()]
    assert all(not p.get("backend") for p in tpuscope.load_run(run_dir).meta["processes"])
