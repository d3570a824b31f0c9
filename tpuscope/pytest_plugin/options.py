"""The plugin's command-line options (`--tpuscope`, `--tpuscope-max-*`, `--tpuscope-store`) and the
checks made on them before any test runs."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest


def _count(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text) if text.strip().isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, not {text!r}")
    return value


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpuscope", "tpuscope: recompiles and CPU fallbacks per test")
    group.addoption(
        "--tpuscope",
        action="store_true",
        default=False,
        help="watch every test and list its compiles and CPU fallbacks in the summary",
    )
    group.addoption(
        "--tpuscope-max-recompiles",
        type=_count,
        metavar="N",
        default=None,
        help="fail a watched test that recompiles more than N times "
        "(implies --tpuscope; a marker's own value wins)",
    )
    group.addoption(
        "--tpuscope-max-fallbacks",
        type=_count,
        metavar="N",
        default=None,
        help="fail a watched test whose ops run on the host (CPU fallbacks) more than N times "
        "(implies --tpuscope; a marker's own value wins)",
    )
    group.addoption(
        "--tpuscope-store",
        metavar="DIR|URL",
        default=None,
        help="save every watched test as a run in DIR or an fsspec URL such as "
        "gs://bucket/runs (tpuscope show, the dashboard)",
    )
    group.addoption(
        "--tpuscope-no-shapes",
        action="store_true",
        default=False,
        help="no XLA HLO dump: failures say no 'what changed', compiles run faster",
    )


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
        watch_all = (
            bool(config.getoption("tpuscope"))
            or max_recompiles is not None
            or max_fallbacks is not None
        )
        return cls(
            watch_all,
            max_recompiles,
            max_fallbacks,
            str(store) if store else None,
            shapes=not config.getoption("tpuscope_no_shapes"),
        )


def is_xdist_controller(config: pytest.Config) -> bool:
    """The xdist controller runs no test; its workers load this plugin themselves."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def check_store(store: str) -> None:
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
            f"tpuscope: cannot write to --tpuscope-store {store}: {exc.strerror or exc}"
        ) from exc
