"""The pytest plugin on JAX code: real pytest sessions over real JAX on the CPU.

JAX's caches, config and the collector's hooks are per process, so every session is
a subprocess. One session (`cases`) runs the scenarios at once under --tpuscope with a
store, and the tests below read its output and its runs; the inertness check is a
second, small session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tpuscope

pytest_plugins = ["pytester"]
# What loading the plugin imports of tpuscope: its own package, nothing that collects or reads.
PLUGIN_MODULES = [
    "tpuscope",
    "tpuscope.pytest_plugin",
    "tpuscope.pytest_plugin.fixture",
    "tpuscope.pytest_plugin.marker",
    "tpuscope.pytest_plugin.options",
    "tpuscope.pytest_plugin.session",
    "tpuscope.version",
]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)

# Unrelated plugins installed here (dash, hypothesis, benchmark) cost ~5 s per pytest start.
QUIET = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:dash",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:benchmark",
)
SCRUBBED = (
    "PT_XLA_DEBUG_LEVEL",
    "PT_XLA_DEBUG_FILE",
    "TPUSCOPE_OWNS_PT_XLA_DEBUG",
    "TPUSCOPE_XLA_DUMP_DIR",
    "XLA_FLAGS",
    "PYTEST_ADDOPTS",
    "PYTEST_XDIST_WORKER",
    "JAX_EXPLAIN_CACHE_MISSES",
    "JAX_ENABLE_X64",
    "TPUSCOPE_TRACE_STEPS",
)

# Every watch must leave JAX as it found it (the pyinstrument way: assert no leaked hooks).
CASES_CONFTEST = """
import jax
import pytest
from jax._src.array import ArrayImpl
from jax._src.core import EvalTrace

ORIGINAL = (jax.jit, ArrayImpl.__dict__["__float__"], EvalTrace.__dict__["process_primitive"])


@pytest.fixture(autouse=True)
def no_leaked_hooks():
    yield
    now = (jax.jit, ArrayImpl.__dict__["__float__"], EvalTrace.__dict__["process_primitive"])
    assert now == ORIGINAL
    assert not jax.config.jax_explain_cache_misses
"""

# test_static runs first and compiles train_step for f32[32,64]: test_short_last_batch
# must still see its own retrace (each watch starts from cleared JAX caches).
CASES = """
import functools

import jax
import jax.numpy as jnp
import pytest


@jax.jit
def train_step(w, batch):
    return w - 0.1 * jnp.mean(batch["x"] @ w, axis=0)


@functools.partial(jax.jit, static_argnames="n")
def power(x, n):
    return x ** n


W = jnp.ones((64, 4))


@pytest.mark.tpuscope(max_recompiles=0)
def test_static():
    w = W
    for _ in range(4):
        w = train_step(w, {"x": jnp.ones((32, 64))})
    assert bool(jnp.isfinite(w).all())  # a value read after the loop: not a compile of train_step


@pytest.mark.tpuscope(max_recompiles=0)
def test_short_last_batch():
    w = W
    for n in (32, 32, 8):
        w = train_step(w, {"x": jnp.ones((n, 64))})  # LAST BATCH


@pytest.mark.tpuscope(max_recompiles=0)
def test_static_argument():
    for n in (2, 3):
        power(W, n=n)  # STATIC ARG


@pytest.mark.tpuscope(max_recompiles=0)
def test_jit_in_loop():
    for _ in range(3):
        jax.jit(lambda v: v + 1)(W)  # REDEFINED


@pytest.mark.tpuscope(max_recompiles=0)
def test_eager_ops_are_not_judged():
    for n in (5, 6, 7):
        y = jnp.arange(n) * 2
    assert int(y[-1]) == 12


def test_fixture_api(tpuscope):
    with tpuscope.watch() as w:
        for n in (16, 16, 24):
            train_step(W, {"x": jnp.ones((n, 64))})  # FIXTURE CALL
    assert (w.compiles_after_warmup, w.fallbacks) == (1, {})
    again = w.recompiles[0]
    assert (again.function, again.number) == ("train_step", 2)
    assert again.changes == ("arg batch['x']: f32[16,64] -> f32[24,64]",)
    assert again.cause == "retrace of train_step: arg batch['x']: f32[16,64] -> f32[24,64]"
    with pytest.raises(AssertionError, match="1 recompile, limit 0"):
        w.assert_no_recompiles()
    w.assert_no_fallbacks()


def test_warmed_up_before_the_watch(tpuscope):
    batch = {"x": jnp.ones((40, 64))}
    train_step(W, batch)
    with tpuscope.watch(warmup_steps=0) as warm:
        for _ in range(3):
            train_step(W, batch)
    assert (warm.compiles, warm.compiles_after_warmup) == (0, 0)
    with tpuscope.watch(warmup_steps=0) as cold:
        train_step(W, {"x": jnp.ones((48, 64))})
    assert [(r.function, r.number) for r in cold.recompiles] == [("train_step", 1)]
    (change,) = cold.recompiles[0].changes  # against JAX's closest earlier key: any earlier batch
    assert change.startswith("arg batch['x']: f32[") and change.endswith(",64] -> f32[48,64]")


def test_without_explanations(tpuscope, monkeypatch):
    monkeypatch.setenv("JAX_EXPLAIN_CACHE_MISSES", "0")  # the user's choice: JAX explains nothing
    with tpuscope.watch() as w:
        for n in (56, 56, 60):
            train_step(W, {"x": jnp.ones((n, 64))})
    mine = [r for r in w.recompiles if r.function == "train_step"]
    assert [(r.number, r.cause, r.changes) for r in mine] == \
        [(2, "compile of train_step", ("arg 1: f32[56,64] -> f32[60,64]",))]
    assert mine[0].fix.startswith("Keep the input shapes of train_step the same on every call")
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)


def line_of(source: str, marker: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if marker in text)


def esc(line: str) -> str:
    """A literal line for fnmatch_lines (which reads `[...]` as a character class)."""
    return line.replace("[", "[[]")


def run_pytest(folder: Path, *args: str, timeout: float = 300) -> pytest.RunResult:
    """pytest in a subprocess (as pytester.runpytest_subprocess does), kept for a whole module."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *QUIET, *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return pytest.RunResult(
        proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), 0.0
    )


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[pytest.RunResult, Path]:
    """One real session of CASES under --tpuscope with a store: (result, store)."""
    folder = tmp_path_factory.mktemp("jax_cases")
    (folder / "conftest.py").write_text(CASES_CONFTEST)
    (folder / "test_jax_cases.py").write_text(CASES)
    store = folder / "store"
    return run_pytest(folder, "--tpuscope", f"--tpuscope-store={store}", "test_jax_cases.py"), store


def test_static_passes_and_retraces_fail(cases) -> None:
    result, _ = cases
    result.assert_outcomes(passed=5, failed=3)
    result.stdout.fnmatch_lines_random(
        [
            "FAILED test_jax_cases.py::test_short_last_batch - Failed: tpuscope: 1 re*",
            "FAILED test_jax_cases.py::test_static_argument - Failed: tpuscope: 1 re*",
            "FAILED test_jax_cases.py::test_jit_in_loop - Failed: tpuscope: 2 re*",
        ]
    )
    result.stdout.no_fnmatch_line("*FAILED*test_static -*")


def test_short_last_batch_names_function_line_and_change(cases) -> None:
    result, _ = cases
    line = line_of(CASES, "LAST BATCH")
    defined = line_of(CASES, "def train_step") - 1  # JAX counts the decorator line
    result.stdout.fnmatch_lines(
        [
            "*_ test_short_last_batch _*",
            "tpuscope: 1 recompile, limit 0 (a recompile: a graph compiled again after its first compile, "
            "judged per graph family: the same line and graph structure, or the same jitted function)",
            f"  compile 2 of train_step (test_jax_cases.py:{defined}), cause: retrace of train_step",
            f'    at test_jax_cases.py:{line}: w = train_step(w, {{"x": jnp.ones((n, 64))}})  # LAST BATCH',
            esc("    what changed: arg batch['x']: f32[32,64] -> f32[8,64]"),
            esc(
                "  fix: Give batch['x'] the same shape on every call of train_step: pad it to a fixed size*"
            ),
        ]
    )


def test_static_argument_and_redefinition_are_named(cases) -> None:
    result, _ = cases
    static, redefined = line_of(CASES, "STATIC ARG"), line_of(CASES, "REDEFINED")
    result.stdout.fnmatch_lines(
        [
            "*_ test_static_argument _*",
            "  compile 2 of power (test_jax_cases.py:*), cause: retrace of power",
            f"    at test_jax_cases.py:{static}: power(W, n=n)  # STATIC ARG",
            "    what changed: static arg n: 2 -> 3",
            "  fix: Each new value of the static argument n compiles power again: pass it as an array*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_jit_in_loop _*",
            "tpuscope: 2 recompiles, limit 0 *",
            f"  compile 2 of <lambda> (test_jax_cases.py:{redefined}), cause: <lambda> re-defined on every call",
            f"    at test_jax_cases.py:{redefined}: jax.jit(lambda v: v + 1)(W)  # REDEFINED",
            "    what changed: a new function object on every call, so jit's cache never hits",
            "  compile 3 of <lambda> *",
            "  fix: <lambda> is jitted anew on every call *: create the jitted function once and reuse it.",
        ]
    )


def test_summary_lists_every_watched_test(cases) -> None:
    result, store = cases
    result.stdout.fnmatch_lines(
        [
            "*- tpuscope: 8 watched tests -*",
            " steps  compiles  recompiles  fallbacks  test",
            "     1         *           0          0  test_jax_cases.py::test_static",
            "     1         *           1          0  test_jax_cases.py::test_short_last_batch  "
            "OVER LIMIT: 1 recompile > 0",
            "     1         *           1          0  test_jax_cases.py::test_static_argument  "
            "OVER LIMIT: 1 recompile > 0",
            "     * test_jax_cases.py::test_jit_in_loop  OVER LIMIT: 2 recompiles > 0",
            "     1         *           0          0  test_jax_cases.py::test_eager_ops_are_not_judged",
            "     1         *           1          0  test_jax_cases.py::test_fixture_api",
            # calls that hit the cache never leave C++: a watch with no compile sees no step
            "     0         0           0          0  test_jax_cases.py::test_warmed_up_before_the_watch",
            "     1         *           1          0  test_jax_cases.py::test_warmed_up_before_the_watch (watch 2)",
            "     1         *           *          0  test_jax_cases.py::test_without_explanations",
            f"runs saved in {store} (tpuscope ls --store {store})",
        ]
    )


def test_store_keeps_each_watched_jax_test_as_a_run(cases) -> None:
    _, store = cases
    runs = {}
    for path in store.iterdir():
        run = tpuscope.load_run(path)
        runs[run.meta["name"]] = run
    assert len(runs) == 9
    short = runs["test_jax_cases.py::test_short_last_batch"]
    assert (
        short.meta["processes"][0]["backend"] == "jax" and short.meta["jax_caches_cleared"] is True
    )
    train = short.compiles[short.compiles["cause"].str.contains("train_step")]
    assert list(train["cause"]) == [
        "first trace of train_step",
        "retrace of train_step: arg batch['x']: f32[32,64] -> f32[8,64]",
    ]
    assert [list(s) for s in train["input_shapes"]] == [
        ["f32[64,4]", "f32[32,64]"],
        ["f32[64,4]", "f32[8,64]"],
    ]
    retrace = short.retraces[short.retraces["kind"] == "input_types"].iloc[0]
    assert (retrace["function"], retrace["arg"], retrace["before"], retrace["after"]) == (
        "train_step",
        "batch['x']",
        "f32[32,64]",
        "f32[8,64]",
    )
    eager = runs["test_jax_cases.py::test_eager_ops_are_not_judged"]
    assert eager.compiles["cause"].str.contains("outside jit").sum() >= 3  # compiled, not judged
    fixture = runs["test_jax_cases.py::test_fixture_api"].compiles
    retraced = fixture[fixture["cause"].str.startswith("retrace of train_step")]
    assert list(retraced["location"]) == [
        f"{store.parent}/test_jax_cases.py:{line_of(CASES, 'FIXTURE CALL')}"
    ]
    warm = runs["test_jax_cases.py::test_warmed_up_before_the_watch"]
    assert "jax_caches_cleared" not in warm.meta  # warmup_steps=0 keeps the caches


def test_loading_the_plugin_leaves_jax_alone(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JAX test suite that does not use tpuscope: no tpuscope internals, no hook."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    pytester.makeconftest("""
        import json, sys
        import jax

        ORIGINAL_JIT = jax.jit

        def pytest_unconfigure(config):
            mods = sorted(m for m in sys.modules if m.split(".")[0] in ("torch_xla", "tpuscope"))
            report = {"mods": mods, "jit": jax.jit is ORIGINAL_JIT,
                      "explain": jax.config.jax_explain_cache_misses,
                      "runner": config.pluginmanager.has_plugin("tpuscope-runner")}
            with open("report.json", "w") as f:
                json.dump(report, f)
    """)
    pytester.makepyfile("""
        import jax, jax.numpy as jnp

        def test_jitted():
            f = jax.jit(lambda x: x + 1)
            assert int(f(jnp.int32(1))) == 2 and int(f(jnp.ones(2, jnp.int32))[0]) == 2
    """)
    result = pytester.runpytest_subprocess(*QUIET)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*watched test*")
    report = json.loads((pytester.path / "report.json").read_text())
    assert report == {"mods": PLUGIN_MODULES, "jit": True, "explain": False, "runner": False}


def test_causes_name_their_function() -> None:
    """The JAX collector's cause vocabulary (docs/backends.md), as the watch reads it."""
    from tpuscope.analyze.families import jax_program as function_of
    from tpuscope.detect.jax_advice import arg_name

    assert function_of("first trace of train_step") == ("train_step", False)
    assert function_of("retrace of f: arg x: f32[16,8] -> f32[10,8]; arg y: i32[] -> f32[]") == (
        "f",
        False,
    )
    assert function_of("retrace of g: static arg [0][1]: 2 -> 3 [persistent cache hit]") == (
        "g",
        False,
    )
    assert function_of(
        "<lambda> re-defined on every call: a new function object misses the jit cache"
    ) == ("<lambda>", False)
    assert function_of("compile of jitted init (library code, which JAX does not explain)") == (
        "init",
        False,
    )
    assert function_of("JAX library function sin compiled for a call outside jit (eager op)") == (
        "sin",
        True,
    )
    assert function_of("compile of f") == ("f", False)
    assert function_of("user torch_xla.sync") == (None, False)
    assert function_of(None) == (None, False)
    assert (
        arg_name("[0][1]"),
        arg_name("[1]['n']"),
        arg_name("[0][0]['x']"),
        arg_name("batch['x']"),
    ) == ("args[1]", "n", "args[0]['x']", "batch['x']")
