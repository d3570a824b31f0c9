"""The pytest plugin, end to end: real pytest sessions over real torch_xla on the CPU.

torch_xla's state (compile cache, counters, PT_XLA_DEBUG settings) is per process, so
every session that runs torch_xla is a subprocess. Importing torch_xla costs seconds,
so one session (`cases`) runs most scenarios at once and the tests below read its
output; usage errors and the inertness check need no torch_xla and stay cheap.
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
from tpuscope.schema_consts import DEFAULT_WARMUP

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

needs_torch_xla = pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed"
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
)

CONFTEST = """
import os
os.environ.setdefault("PJRT_DEVICE", "CPU")
"""

# Every watch must leave torch_xla as it found it (the pyinstrument way: assert no leaked hooks).
CASES_CONFTEST = (
    CONFTEST
    + """
import pytest
import torch


@pytest.fixture(autouse=True)
def no_leaked_hooks():
    import torch_xla.core.xla_model as xm

    yield
    assert xm._run_step_closures.__module__ == "torch_xla.core.xla_model"
    assert torch._C._len_torch_function_stack() == 0
"""
)

# Each test uses its own shapes: the XLA compile cache is per process, shared by tests.
CASES = """
import pytest
import torch
import torch_xla

DEV = torch_xla.device()


@pytest.mark.tpuscope(max_recompiles=0, max_fallbacks=0, warmup_steps=1)
def test_static():
    for _ in range(4):
        y = torch.ones(5).to(DEV) * 2
        torch_xla.sync()
    assert torch.isfinite(y).all().item()  # a check after the last step is not judged


@pytest.mark.tpuscope(max_recompiles=0)
def test_varying_shapes():
    for n in (11, 12, 13, 14):
        y = torch.ones(3, n).to(DEV) + 1
        torch_xla.sync()  # VARYING SYNC


@pytest.mark.tpuscope(max_recompiles=0)
def test_bucketed_shapes():
    # padded to 2 buckets, each compiled once, then run from the cache: the report's bounded
    # note, not a recompile, so the watch passes as the report's `--fail-on recompile` would
    for n in (48, 64, 48, 64, 64, 48, 64, 48):
        y = torch.ones(3, n).to(DEV) + 1
        torch_xla.sync()


@pytest.mark.tpuscope(max_fallbacks=0)
def test_boolean_mask():
    x = torch.arange(8.0, device=DEV)
    for _ in range(3):
        kept = x[x > 3]  # MASK LINE
        torch_xla.sync()


@pytest.mark.tpuscope(max_fallbacks=0, allow_fallbacks=["aten::nonzero"])
def test_boolean_mask_allowed():
    x = torch.arange(9.0, device=DEV)
    kept = x[x > 4]
    torch_xla.sync()


def test_fixture_api(tpuscope):
    with tpuscope.watch(warmup_compiles=1) as w:
        for n in (21, 22):
            y = torch.ones(n, device=DEV) * 3
            torch_xla.sync()
    assert (w.steps, w.compiles, w.compiles_after_warmup, w.fallbacks) == (2, 2, 1, {})
    # compiles per family are the watch's judgement; the run's step warm-up is every run's
    assert (w.warmup_compiles, w.warmup_steps, w.run.meta["warmup"]) == (1, 1, 2)
    assert w.recompiles[0].step == 1 and w.recompiles[0].cause == "user torch_xla.sync"
    with pytest.raises(AssertionError, match="1 recompile, limit 0"):
        w.assert_no_recompiles()
    w.assert_no_fallbacks()


def test_fixture_fallbacks(tpuscope):
    with tpuscope.watch() as w:
        x = torch.arange(10.0, device=DEV)
        total = x[x > 5].sum().item()
    assert total == 30.0
    assert w.fallbacks == {"aten::nonzero": 1}  # .item() is a value read (a host sync), not a fallback
    w.assert_no_fallbacks(allow=["aten::nonzero"])
    with pytest.raises(AssertionError, match="aten::nonzero ran on the host 1 time"):
        w.assert_no_fallbacks()


def test_unmarked_varying():
    for n in (31, 32, 33):
        y = torch.ones(n, device=DEV) - 1
        torch_xla.sync()
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest sessions below start from a plain environment, even when this suite runs
    under xdist or with tpuscope's own variables set."""
    for name in SCRUBBED:
        monkeypatch.delenv(name, raising=False)


def line_of(source: str, marker: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if marker in text)


def run_pytest(folder: Path, *args: str, timeout: float = 600) -> pytest.RunResult:
    """pytest in a subprocess, as pytester.runpytest_subprocess does, kept for a whole module."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PJRT_DEVICE"] = "CPU"
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
    if importlib.util.find_spec("torch_xla") is None:
        pytest.skip("torch_xla is not installed")
    folder = tmp_path_factory.mktemp("cases")
    (folder / "conftest.py").write_text(CASES_CONFTEST)
    (folder / "test_cases.py").write_text(CASES)
    store = folder / "store"
    return run_pytest(folder, "--tpuscope", f"--tpuscope-store={store}", "test_cases.py"), store


@needs_torch_xla
def test_static_passes_and_the_rest_as_expected(cases) -> None:
    result, _ = cases
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_cases.py::test_varying_shapes - Failed: tpuscope: 3 recompiles*",
            "*test_cases.py::test_boolean_mask - Failed: tpuscope: *",
        ]
    )
    result.stdout.no_fnmatch_line("*FAILED*test_static*")


@needs_torch_xla
def test_varying_shapes_fail_naming_step_cause_and_line(cases) -> None:
    result, _ = cases
    sync = line_of(CASES, "VARYING SYNC")
    result.stdout.fnmatch_lines(
        [
            "*_ test_varying_shapes _*",
            "tpuscope: 3 recompiles, limit 0 (a recompile: a graph compiled again after its first compile, "
            "judged per graph family: the same line and graph structure, or the same jitted function)",
            "  step 1: graph * compiled, cause: user torch_xla.sync",
            f"    at test_cases.py:{sync}: torch_xla.sync()  # VARYING SYNC",
            "    what changed: arg *: f32[[]3,11] -> f32[[]3,12]",
            "  step 2: graph * compiled, cause: user torch_xla.sync",
            f"    at test_cases.py:{sync}: torch_xla.sync()  # VARYING SYNC",
            "    what changed: arg *: f32[[]3,12] -> f32[[]3,13]",
            "  step 3: graph * compiled, cause: user torch_xla.sync",
            f"    at test_cases.py:{sync}: torch_xla.sync()  # VARYING SYNC",
            "    what changed: arg *: f32[[]3,13] -> f32[[]3,14]",
            "  fix: Keep the input shapes fixed: pad dim 1 of arg 0 to the buckets {12, 14}*",
        ]
    )


@needs_torch_xla
def test_boolean_mask_fails_naming_nonzero_and_its_line(cases) -> None:
    result, _ = cases
    mask = line_of(CASES, "MASK LINE")
    result.stdout.fnmatch_lines(
        [
            "*_ test_boolean_mask _*",
            "tpuscope: 3 CPU fallbacks (ops torch_xla ran on the host), limit 0",
            "  aten::nonzero ran on the host 3 times (steps 0-2)",
            f"    at test_cases.py:{mask}: kept = x[[]x > 3]  # MASK LINE",
            f"    fix: At test_cases.py:{mask}: replace `x[[]mask]` by a static-shape form: *",
        ]
    )


@needs_torch_xla
def test_summary_lists_every_watched_test(cases) -> None:
    """--tpuscope watches unmarked tests too: listed, judged only when limits are given."""
    result, store = cases
    result.stdout.fnmatch_lines(
        [
            "*- tpuscope: 8 watched tests -*",
            " steps  compiles  recompiles  fallbacks  test",
            "     5         2           0          0  test_cases.py::test_static",
            "     4         4           3          0  test_cases.py::test_varying_shapes  "
            "OVER LIMIT: 3 recompiles > 0",
            "     8         2           0          0  test_cases.py::test_bucketed_shapes",
            # 4 compiles, 4 graph families: `x` is an arange graph in step 0 and device data after
            "     3         4           0          3  test_cases.py::test_boolean_mask (aten::nonzero x3)  "
            "OVER LIMIT: 3 fallbacks > 0",
            "     1         * 0          1  test_cases.py::test_boolean_mask_allowed (aten::nonzero x1)",
            "     2         2           1          0  test_cases.py::test_fixture_api",
            "     1         * 0          1  test_cases.py::test_fixture_fallbacks (aten::nonzero x1)",
            "     3         3           2          0  test_cases.py::test_unmarked_varying",
            f"runs saved in {store} (tpuscope ls --store {store})",
        ]
    )


@needs_torch_xla
def test_store_keeps_each_watched_test_as_a_run(cases) -> None:
    _, store = cases
    runs = {tpuscope.load_run(p).meta["test"]: tpuscope.load_run(p) for p in store.iterdir()}
    assert len(runs) == 8
    varying = runs["test_cases.py::test_varying_shapes"]
    # the run's step warm-up is every run's (DEFAULT_WARMUP); the watch's is compiles per family
    assert varying.meta["status"] == "finished" and varying.meta["warmup"] == DEFAULT_WARMUP
    assert list(varying.steps["step"]) == [0, 1, 2, 3]
    assert len(varying.compiles) == 4 and varying.compiles["cause"].eq("user torch_xla.sync").all()
    assert varying.meta["env_set"]["PT_XLA_DEBUG_LEVEL"] == "1"  # tpuscope set it, and says so
    assert "--xla_dump_to=" in varying.meta["env_set"]["XLA_FLAGS"]
    assert [list(s) for s in varying.compiles["input_shapes"]] == [
        [f"f32[3,{n}]"] for n in (11, 12, 13, 14)
    ]
    mask = runs["test_cases.py::test_boolean_mask"]
    assert mask.fallbacks.groupby("op")["count"].sum().to_dict() == {"aten::nonzero": 3}


@needs_torch_xla
def test_xdist_workers_report_their_own_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_pair="""
        import pytest, torch, torch_xla

        @pytest.mark.tpuscope(max_recompiles=0)
        def test_same_shape():
            for _ in range(3):
                y = torch.ones(6, device=torch_xla.device()) * 2
                torch_xla.sync()

        @pytest.mark.tpuscope(max_recompiles=0)
        def test_new_shapes():
            for n in (41, 42, 43):
                y = torch.ones(n, device=torch_xla.device()) * 2
                torch_xla.sync()
    """
    )
    result = pytester.runpytest_subprocess("-n", "2", *QUIET)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            "     3         1           0          0  test_pair.py::test_same_shape [[]gw?[]]",
            "     3         3           2          0  test_pair.py::test_new_shapes [[]gw?[]]  "
            "OVER LIMIT: 2 recompiles > 0",
            "tpuscope: 2 recompiles, limit 0*",
        ]
    )


def test_loading_the_plugin_imports_no_framework(pytester: pytest.Pytester) -> None:
    """Inert unless used: no torch_xla, jax or tpuscope internals, no env change, no summary."""
    pytester.makeconftest("""
        import json, os, sys

        def pytest_unconfigure(config):
            mods = sorted(m for m in sys.modules
                          if m.split(".")[0] in ("torch_xla", "jax", "tpuscope"))
            env = sorted(k for k in os.environ if k.startswith("PT_XLA_DEBUG"))
            pm = config.pluginmanager
            report = {"mods": mods, "env": env, "plugin": pm.has_plugin("tpuscope"),
                      "runner": pm.has_plugin("tpuscope-runner")}
            with open("report.json", "w") as f:
                json.dump(report, f)
    """)
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess(*QUIET)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*watched test*")
    report = json.loads((pytester.path / "report.json").read_text())
    assert report == {"mods": PLUGIN_MODULES, "env": [], "plugin": True, "runner": False}


def test_bad_marker_arguments_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tpuscope(max_recompile=0)
        def test_typo(): pass

        @pytest.mark.tpuscope(1)
        def test_positional(): pass

        @pytest.mark.tpuscope(max_fallbacks=-1)
        def test_negative(): pass

        @pytest.mark.tpuscope(allow_fallbacks="aten::nonzero")
        def test_not_a_list(): pass

        @pytest.mark.tpuscope(warmup_steps=None)
        def test_no_warmup(): pass

        @pytest.mark.tpuscope(warmup_steps=1, warmup_compiles=1)
        def test_both_names(): pass
    """)
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: tpuscope: bad @pytest.mark.tpuscope on test_bad_marker_arguments_are_usage_errors.py"
            "::test_typo: unknown keyword 'max_recompile' (it takes max_recompiles, max_fallbacks, "
            "warmup_compiles, allow_fallbacks)",
            "tpuscope: bad * on *::test_positional: takes keyword arguments only, got (1,)",
            "tpuscope: bad * on *::test_negative: max_fallbacks must be an integer >= 0, not -1",
            "tpuscope: bad * on *::test_not_a_list: allow_fallbacks must be a list of op names*",
            "tpuscope: bad * on *::test_no_warmup: warmup_steps must be an integer >= 0, not None",
            "tpuscope: bad * on *::test_both_names: warmup_steps is the older name of warmup_compiles: give one",
        ]
    )


def test_bad_command_line_values_are_usage_errors(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest(*QUIET, "--tpuscope-max-recompiles=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*argument --tpuscope-max-recompiles: expected an integer >= 0, not '-1'"]
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = pytester.runpytest(*QUIET, f"--tpuscope-store={blocker / 'store'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: tpuscope: cannot write to --tpuscope-store {blocker}/store: *"]
    )


def test_early_preparation_reads_code_not_text() -> None:
    """Files that use the marker or fixture prepare the process before their imports run;
    a file that only mentions tpuscope in a string (like this one) does not."""
    from tpuscope.pytest_plugin import uses_tpuscope

    assert uses_tpuscope(CASES.encode())
    assert uses_tpuscope(b"from pytest import mark\n@mark.tpuscope\ndef test_a(): pass\n")
    assert uses_tpuscope(b"async def test_a(x, *, tpuscope): pass\n")
    assert not uses_tpuscope(Path(__file__).read_bytes())
    assert not uses_tpuscope(b"# tpuscope\ndef test_a(request): request.getfixturevalue('x')\n")


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*QUIET, "--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.tpuscope(max_recompiles=0, max_fallbacks=0, "
            "warmup_compiles=1, allow_fallbacks=[]): fail the test if *"
        ]
    )
