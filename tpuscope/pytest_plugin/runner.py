"""The per-test hooks, registered once a test is watched: prepare the process (PT_XLA_DEBUG before
torch_xla's first compile), wrap each watched test's call in a Watch and judge it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tpuscope.pytest_plugin.marker import SPEC_KEY, WATCHES_KEY, Spec
from tpuscope.pytest_plugin.options import Options

if TYPE_CHECKING:
    from tpuscope.watch.engine import Watch


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

    def new_watch(self, item: pytest.Item, warmup_compiles: int, name: str | None = None) -> Watch:
        watches = item.stash.setdefault(WATCHES_KEY, [])
        label = name or (
            item.nodeid if not watches else f"{item.nodeid} (watch {len(watches) + 1})"
        )
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        meta = {"test": item.nodeid, "command": f"pytest {item.nodeid}", "xdist_worker": worker}
        watch = self.watch_module.Watch(
            name=label, warmup_compiles=warmup_compiles, store=self.store, meta=meta
        )
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
            with self.new_watch(item, spec.warmup_compiles):
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
