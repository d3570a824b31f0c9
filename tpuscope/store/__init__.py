"""The run store: Parquet parts per table plus JSON meta, one folder per run."""

from typing import Any

from tpuscope.store.parts import PartWriter, read_table
from tpuscope.store.runstore import RunStore, StoreError, default_store, read_meta, update_meta

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
    """`Run` and `load_run` on first use: they need pandas, which a profiled program's
    collectors (importing the writer from here) should not load into its process."""
    if name in ("Run", "load_run"):
        from tpuscope.store import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
