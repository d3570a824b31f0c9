"""The run store: Parquet parts per table plus JSON meta, one folder per run.

Names load on first use: a profiled process imports `tpuscope.store.runstore` at start-up
and must not pay for pandas (`Run`) or pyarrow (`read_table`) until it reads or writes rows.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpuscope.store.buffer import PartWriter
    from tpuscope.store.files import StoreError
    from tpuscope.store.parts import read_table
    from tpuscope.store.run import Run, load_run
    from tpuscope.store.runstore import RunStore, default_store, read_meta, update_meta

_HOMES = {
    "PartWriter": "buffer",
    "read_table": "parts",
    "Run": "run",
    "load_run": "run",
    "RunStore": "runstore",
    "StoreError": "files",
    "default_store": "runstore",
    "read_meta": "runstore",
    "update_meta": "runstore",
}

__all__ = [
    "PartWriter",
    "Run",
    "RunStore",
    "StoreError",
    "default_store",
    "load_run",
    "read_meta",
    "read_table",
    "update_meta",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tpuscope.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tpuscope.store.{home}"), name)
    globals()[name] = value
    return value
