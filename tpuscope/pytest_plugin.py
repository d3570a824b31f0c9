"""tpuscope's pytest plugin: assert zero recompiles and zero CPU fallbacks in any test
(torch_xla and JAX; how each is judged is in tpuscope.watch.engine and tpuscope.watch.jax_rules).

    @pytest.mark.tpuscope(max_recompiles=0, max_fallbacks=0, warmup_steps=1)
    def test_decode_step_is_static(model, batch): ...

    def test_train_loop(tpuscope):
        with tpuscope.watch(warmup_steps=1) as w:
            train_a_few_steps()
        w.assert_no_recompiles()

Loaded through the `pytest11` entry point and inert unless used: this module imports
only pytest and the standard library, and nothing else happens (no framework import,
no environment change, no per-test hook) until a collected test is watched — marked,
taking the `tpuscope` fixture, or run under `--tpuscope`. The work lives in
tpuscope.watch.engine; this is the pytest shell around it (docs/pytest.md).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tpuscope.watch.engine import Limits, Watch

MARKER = FIXTURE = "tpuscope"
PLUGIN_NAME = "tpuscope-session"
RUNNER_NAME = "tpuscope-runner"
MARKER_HELP = ("tpuscope(max_recompiles=0, max_fallbacks=0, warmup_steps=1, allow_fallbacks=[]): "
               "fail the test if it recompiles (a graph compiled again from the same line and "
               "structure; JAX: a jitted function compiled again) or runs aten ops on the host")


class MarkerError(ValueError):
    """A @pytest.mark.tpuscope with arguments it does not take."""


@dataclass(frozen=True)
class Spec:
    """How one test is watched; limits of None are not checked."""

    warmup_steps: int = 1
    max_recompiles: int | None = None
    max_fallbacks: int | None = None
    allow_fallbacks: tuple[str, ...] = ()
    manual: bool = False  # the test takes the fixture and places its own watches

    def limits(self) -> Limits:
        from tpuscope.watch.engine import Limits

        return Limits(self.max_recompiles, self.max_fallbacks, self.allow_fallbacks)


SPEC_KEY = pytest.StashKey[Spec]()
WATCHES_KEY = pytest.StashKey[list]()


def _count(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text) if text.strip().isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, not {text!r}")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpuscope", "tpuscope: recompiles and CPU fallbacks per test")
    group.addoption("--tpuscope", action="store_true", default=False,
                    help="watch every test and list its compiles and CPU fallbacks in the summary")
    group.addoption("--tpuscope-max-recompiles", type=_count, metavar="N", default=None,
                    help="fail a watched test that recompiles more than N times "
                         "(implies --tpuscope; a marker's own value wins)")
    group.addoption("--tpuscope-max-fallbacks", type=_count, metavar="N", default=None,
                    help="fail a watched test whose aten ops run on the host more than N times "
                         "(implies --tpuscope; a marker's own value wins)")
    group.addoption("--tpuscope-store", metavar="DIR|URL", default=None,
                    help="save every watched test as a run in DIR or an fsspec URL such as "
                         "gs://bucket/runs (tpuscope show, the dashboard)")
    group.addoption("--tpuscope-no-shapes", action="store_true", default=False,
                    help="no XLA HLO dump: failures say no 'what changed', compiles run faster")


@dataclass(frozen=True)
class Options:
    watch_all: bool
    max_recompiles: int | None
    max_fallbacks: int | None
    store: str | None  # a folder or an fsspec URL
    shapes: bool = True

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        max_recompiles = config.getoption("tpuscope_max_recompiles")
        max_fallbacks = config.getoption("tpuscope_max_fallbacks")
        store = config.getoption("tpuscope_store")
        watch_all = bool(config.getoption("tpuscope")) or max_recompiles is not None \
            or max_fallbacks is not None
        return cls(watch_all, max_recompiles, max_fallbacks, str(store) if store else None,
                   shapes=not config.getoption("tpuscope_no_shapes"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = Options.from_config(config)
    if options.store is not None:
        _check_store(options.store)
    plugin = TpuscopePlugin(config, options)
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    if options.watch_all and not _is_xdist_controller(config):
        plugin.ensure_runner()  # before test modules import (and start) the frameworks


def _is_xdist_controller(config: pytest.Config) -> bool:
    """The xdist controller runs no test; its workers load this plugin themselves."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def _check_store(store: str) -> None:
    """A folder that can be written (made if absent), or an fsspec URL that can be opened
    (an object store is written through a local stage: a failure there is said per run)."""
    from tpuscope.store import RunStore, StoreError

    try:
        runs = RunStore(store)
    except StoreError as exc:
        raise pytest.UsageError(f"tpuscope: cannot use --tpuscope-store {store}: {exc}") from exc
    if not runs.local:
        return
    root = Path(runs.loc.path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkstemp(dir=root, prefix=".tpuscope-probe-")[1])
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(
            f"tpuscope: cannot write to --tpuscope-store {store}: {exc.strerror or exc}") from exc


# -- which tests are watched -----------------------------------------------------------
def _nonnegative(name: str, value: Any, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MarkerError(f"{name} must be an integer >= 0, not {value!r}")
    return value


def _op_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | set) \
            or not all(isinstance(v, str) for v in value):
        raise MarkerError(f"allow_fallbacks must be a list of op names such as "
                          f"['aten::nonzero'], not {value!r}")
    return tuple(value)


_CHECKS = {
    "max_recompiles": lambda v: _nonnegative("max_recompiles", v, allow_none=True),
    "max_fallbacks": lambda v: _nonnegative("max_fallbacks", v, allow_none=True),
    "warmup_steps": lambda v: _nonnegative("warmup_steps", v, allow_none=False),
    "allow_fallbacks": _op_names,
}


def marker_kwargs(marker: pytest.Mark) -> dict[str, Any]:
    """The marker's keywords, checked against the allowlist (the pytest-benchmark way)."""
    if marker.args:
        raise MarkerError(f"takes keyword arguments only, got {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - set(_CHECKS))
    if unknown:
        raise MarkerError(f"unknown keyword {unknown[0]!r} (it takes {', '.join(_CHECKS)})")
    return {name: _CHECKS[name](value) for name, value in marker.kwargs.items()}


def spec_for(item: pytest.Item, options: Options) -> Spec | None:
    """A marker's value wins over the command line; a marked test's limits default to 0."""
    marker = item.get_closest_marker(MARKER)
    manual = FIXTURE in getattr(item, "fixturenames", ())
    if marker is None and not manual and not options.watch_all:
        return None
    given = marker_kwargs(marker) if marker is not None else {}
    default = 0 if marker is not None else None
    cli = {"max_recompiles": options.max_recompiles, "max_fallbacks": options.max_fallbacks}
    limits = {k: given[k] if k in given else (cli[k] if cli[k] is not None else default) for k in cli}
    return Spec(warmup_steps=given.get("warmup_steps", 1),
                allow_fallbacks=given.get("allow_fallbacks", ()), manual=manual, **limits)


def uses_tpuscope(source: bytes) -> bool:
    """Does a test file mark a test with tpuscope or take the fixture? Parsed only when the
    name occurs at all; text that merely mentions it (a string, a comment) does not count."""
    if b"tpuscope" not in source:
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False  # pytest reports it when it imports the file
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == MARKER:
            owner = node.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "mark") or \
                    (isinstance(owner, ast.Name) and owner.id == "mark"):
                return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                arg.arg == FIXTURE for arg in [*node.args.args, *node.args.kwonlyargs]):
            return True
    return False


class TpuscopePlugin:
    """The session object: picks the watched tests, gathers their figures from the test
    reports (so under pytest-xdist the controller hears every worker) and prints them."""

    def __init__(self, config: pytest.Config, options: Options) -> None:
        self.config = config
        self.options = options
        self.results: list[dict[str, Any]] = []
        self.runner: WatchRunner | None = None

    @pytest.hookimpl(trylast=True)  # after -k/-m deselection
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        errors, watched = [], False
        for item in items:
            try:
                spec = spec_for(item, self.options)
            except MarkerError as exc:
                errors.append(f"tpuscope: bad @pytest.mark.tpuscope on {item.nodeid}: {exc}")
                continue
            if spec is not None:
                item.stash[SPEC_KEY] = spec
                watched = True
        if errors:
            raise pytest.UsageError("\n".join(errors))
        if watched and not config.option.collectonly:
            self.ensure_runner()

    def pytest_pycollect_makemodule(self, module_path: Path) -> None:
        """A test file that uses tpuscope is about to be imported: prepare the process
        first, because its imports may start torch_xla (XLA reads XLA_FLAGS only then)."""
        if self.runner is None and not self.config.option.collectonly:
            try:
                source = module_path.read_bytes()
            except OSError:
                return
            if uses_tpuscope(source):
                self.ensure_runner()

    def ensure_runner(self) -> WatchRunner:
        if self.runner is None:
            self.runner = WatchRunner(self.options)
            self.config.pluginmanager.register(self.runner, RUNNER_NAME)
        return self.runner

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        watches = getattr(report, "tpuscope", None)
        if watches and report.when == "call":
            self.results.append({"nodeid": report.nodeid, "outcome": report.outcome,
                                 "watches": watches})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        count = len(self.results)
        terminalreporter.write_sep("-", f"tpuscope: {count} watched test{'s' * (count != 1)}")
        for line in summary_lines(self.results, self.options.store):
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.runner is not None:
            self.runner.close()


class WatchRunner:
    """Registered once a test is watched: prepares the process (PT_XLA_DEBUG before
    torch_xla's first compile), wraps each watched test's call and judges it."""

    def __init__(self, options: Options) -> None:
        from tpuscope.launch import env as process_env
        from tpuscope.watch import engine as watch

        self.watch_module = watch
        self.options = options
        self.folder = Path(tempfile.mkdtemp(prefix="tpuscope-pytest-"))
        # Without --tpuscope-store the runs go to this session's scratch folder (removed
        # at the end): one folder for all is cheaper than a temporary folder per test.
        self.store = options.store or self.folder / "runs"
        self.settings = process_env.prepare(self.folder, shapes=options.shapes)

    def new_watch(self, item: pytest.Item, warmup_steps: int, name: str | None = None) -> Watch:
        watches = item.stash.setdefault(WATCHES_KEY, [])
        label = name or (item.nodeid if not watches else f"{item.nodeid} (watch {len(watches) + 1})")
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        meta = {"test": item.nodeid, "command": f"pytest {item.nodeid}", "xdist_worker": worker}
        watch = self.watch_module.Watch(name=label, warmup_steps=warmup_steps,
                                        store=self.store, meta=meta)
        watches.append(watch)
        return watch

    @pytest.hookimpl(tryfirst=True)  # before fixtures, which may start watches
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[WATCHES_KEY] = []  # a rerun (pytest-rerunfailures) starts afresh

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        spec = item.stash.get(SPEC_KEY, None)
        if spec is None:
            return (yield)
        if spec.manual:
            result = yield
        else:
            with self.new_watch(item, spec.warmup_steps):
                result = yield
        limits = spec.limits()
        done = [w for w in item.stash.get(WATCHES_KEY, []) if w.run is not None]
        problems = [text for w in done for text in w.problems(limits)]
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when == "call":
            limits = item.stash.get(SPEC_KEY, Spec()).limits()
            done = [w for w in item.stash.get(WATCHES_KEY, []) if w.run is not None]
            if done:
                report.tpuscope = [w.summary(limits) for w in done]
        return report

    def pytest_runtest_teardown(self) -> None:
        self.settings.release_if_read()  # torch_xla may first compile in an unwatched test

    def close(self) -> None:
        from tpuscope.launch import env as process_env

        process_env.reset()
        shutil.rmtree(self.folder, ignore_errors=True)


class TpuscopeFixture:
    """What the `tpuscope` fixture gives a test: `with tpuscope.watch(warmup_steps=1) as w:`."""

    def __init__(self, item: pytest.Item, runner: WatchRunner, spec: Spec) -> None:
        self._item = item
        self._runner = runner
        self._spec = spec

    def watch(self, warmup_steps: int | None = None, name: str | None = None) -> Watch:
        """A new Watch of this test (the marker's warmup_steps by default)."""
        steps = self._spec.warmup_steps if warmup_steps is None else warmup_steps
        return self._runner.new_watch(self._item, steps, name)

    @property
    def watches(self) -> list[Watch]:
        return list(self._item.stash.get(WATCHES_KEY, []))


@pytest.fixture
def tpuscope(request: pytest.FixtureRequest) -> TpuscopeFixture:
    """Watch blocks of this test for recompiles and CPU fallbacks (see docs/pytest.md)."""
    plugin: TpuscopePlugin = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    spec = request.node.stash.get(SPEC_KEY, None) or Spec(manual=True)
    return TpuscopeFixture(request.node, plugin.ensure_runner(), spec)


# -- the terminal summary ---------------------------------------------------------------
def summary_lines(results: list[dict[str, Any]], store: str | Path | None) -> list[str]:
    """One line per watch: steps, compiles, recompiles, fallback calls, test."""
    lines = [f"{'steps':>6} {'compiles':>9} {'recompiles':>11} {'fallbacks':>10}  test"]
    for result in results:
        for watch in result["watches"]:
            fallbacks = watch.get("fallbacks") or {}
            name = watch["name"]
            if watch.get("worker"):
                name += f" [{watch['worker']}]"
            if fallbacks:
                name += " (" + ", ".join(f"{op} x{n}" for op, n in fallbacks.items()) + ")"
            if watch.get("over_limit"):
                name += "  OVER LIMIT: " + "; ".join(watch["over_limit"])
            elif result["outcome"] != "passed":
                name += f"  {result['outcome'].upper()}"
            lines.append(f"{watch['steps']:>6} {watch['compiles']:>9} "
                         f"{watch['recompiles']:>11} {sum(fallbacks.values()):>10}  {name}")
    if store is not None:
        lines.append(f"runs saved in {store} (tpuscope ls --store {store})")
    return lines
