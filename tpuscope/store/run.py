"""A stored run as plain data: meta as a dict, tables as pandas DataFrames."""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from tpuscope.schema import TABLES, Finding
from tpuscope.store.parts import read_table, write_table_atomic
from tpuscope.store.runstore import RunStore, read_meta

ANALYSIS_FILE = "analysis.json"


def table_to_frame(table: Any) -> pd.DataFrame:
    """Arrow -> pandas with dictionary columns as plain strings (easier to compare and filter)."""
    frame = table.to_pandas()
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(object)
    return frame


class Run:
    """Read access to one run folder. Tables load on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @cached_property
    def meta(self) -> dict[str, Any]:
        return read_meta(self.path)

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """One table as a DataFrame; only `columns` (in that order) when given."""
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; tables: {', '.join(TABLES)}")
        if columns is not None and (unknown := sorted(set(columns) - set(TABLES[name].names))):
            raise KeyError(f"table {name!r} has no column {', '.join(unknown)}")
        return table_to_frame(read_table(self.path, name, columns=columns))

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name in TABLES:
            frame = self.table(name)
            self.__dict__[name] = frame
            return frame
        raise AttributeError(name)

    def reload(self) -> None:
        """Forget what was read, so the next access reads the folder as it is now (a run
        read while it was being written, or re-analysed)."""
        path = self.path
        self.__dict__.clear()
        self.path = path

    def findings_list(self) -> list[Finding]:
        return [Finding.from_row(row) for row in self.table("findings").to_dict("records")]

    def write_findings(self, findings: list[Finding]) -> None:
        """Replace the run's findings (analysis is re-runnable, so one part, overwritten)."""
        import pyarrow as pa

        rows = [f.to_row() for f in sorted(findings, key=lambda f: -f.cost_s)]
        table = pa.Table.from_pylist(rows, schema=TABLES["findings"])
        folder = self.path / "findings"
        for old in folder.glob("part-*.parquet") if folder.is_dir() else []:
            if old.name != "part-analysis.parquet":
                old.unlink()
        write_table_atomic(folder / "part-analysis.parquet", table)
        self.__dict__.pop("findings", None)

    @property
    def analysis(self) -> dict[str, Any] | None:
        """The summary the last analysis wrote (tpuscope.detect.run_analysis), None when there is none or
        when a table part is newer than it (rows were added or a part changed since)."""
        path = self.path / ANALYSIS_FILE
        try:
            written = path.stat().st_mtime_ns
            if self._newest_part_ns() > written:
                return None
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def _newest_part_ns(self) -> int:
        """mtime of the newest Parquet part of any table but findings (which analysis writes)."""
        newest = 0
        for name in TABLES:
            folder = self.path / name
            if name == "findings" or not folder.is_dir():
                continue
            with os.scandir(folder) as entries:
                newest = max([newest, *(e.stat().st_mtime_ns for e in entries if e.name.endswith(".parquet"))])
        return newest

    def write_analysis(self, summary: dict[str, Any]) -> None:
        """Replace analysis.json, atomically (a reader never sees half a file)."""
        target = self.path / ANALYSIS_FILE
        tmp = target.with_name(f".{ANALYSIS_FILE}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def load_run(run: str | Path, store: str | Path | None = None) -> Run:
    """Open a run by id (in `store`, default ./tpuscope-runs or $TPUSCOPE_STORE) or by path."""
    return Run(RunStore(store).resolve(run))
