"""The run store: Parquet parts per table plus JSON meta, one folder per run."""

from tpuscope.store.parts import PartWriter, read_table
from tpuscope.store.run import Run, load_run
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
