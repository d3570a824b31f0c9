"""The session object pytest_configure registers: picks the watched tests, gathers their figures
from the test reports (so under pytest-xdist the controller hears every worker), prints them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tpuscope.pytest_plugin.marker import SPEC_KEY, MarkerError, spec_for, uses_tpuscope
from tpuscope.pytest_plugin.options import Options

if TYPE_CHECKING:
    from tpuscope.pytest_plugin.runner import WatchRunner

PLUGIN_NAME = "tpuscope-session"
RUNNER_NAME = "tpuscope-runner"


class TpuscopePlugin:
    """The session object: picks the watched tests, gathers their figures from the test
    reports (so under pytest-xdist the controller hears every worker) and prints them."""

    def __init__(self, config: pytest.Config, options: Options) -> None:
        self.config = config
        self.options = options
        self.results: list[dict[str, Any]] = []
        self.runner: WatchRunner | None = None

    @pytest.hookimpl(trylast=True)  # after -k/-m deselection
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
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
            from tpuscope.pytest_plugin.runner import WatchRunner  # the watch engine, on first use
            from tpuscope.user_files import add_program_folder

            add_program_folder(str(self.config.rootpath))  # the suite's files are the user's
            self.runner = WatchRunner(self.options)
            self.config.pluginmanager.register(self.runner, RUNNER_NAME)
        return self.runner

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        watches = getattr(report, "tpuscope", None)
        if watches and report.when == "call":
            self.results.append(
                {"nodeid": report.nodeid, "outcome": report.outcome, "watches": watches}
            )

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
            lines.append(
                f"{watch['steps']:>6} {watch['compiles']:>9} "
                f"{watch['recompiles']:>11} {sum(fallbacks.values()):>10}  {name}"
            )
    if store is not None:
        lines.append(f"runs saved in {store} (tpuscope ls --store {store})")
    return lines
