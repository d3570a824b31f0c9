"""The importer registry: which reader takes which file, chosen by a sniff function.

An importer turns one file (or folder) users already have into rows of the run
store's tables. `tpuscope import` asks every registered importer's `sniff` whether
it reads a path (sniffs see the path and the first HEAD_BYTES of a file, so they are
cheap and never parse a whole trace); every importer that says yes contributes rows
(a log can hold both PT_XLA_DEBUG blocks and a metrics report). Other modules add
readers with `register(Importer(...))`, e.g. xplane and HLO-dump importers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

HEAD_BYTES = 65536


class ImportRefused(Exception):
    """A file no importer can read, or one that failed to parse; the message says why."""


@dataclass
class Imported:
    """What one importer read from one file: rows per table, meta, a one-line summary (a
    finding's evidence is analyze.evidence.Evidence)."""

    rows: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    # Big tables (a trace's events) as Arrow tables already in the store schema, process fields set.
    tables: dict[str, list[Any]] = field(default_factory=dict)
    # Files inside a folder that could not be read while the rest was: {"path", "reason"}.
    refused: list[dict[str, str]] = field(default_factory=list)
    # Files kept in the run folder: path relative to the run -> source file.
    files: dict[str, Path] = field(default_factory=dict)
    # The files of a folder this importer read (the others are named as skipped).
    read: list[Path] = field(default_factory=list)

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows.setdefault(table, []).extend(rows)

    def count(self) -> int:
        return sum(len(r) for r in self.rows.values()) + sum(
            t.num_rows for ts in self.tables.values() for t in ts
        )


@dataclass(frozen=True)
class Importer:
    """A named reader: `sniff(path, head)` says yes or no cheaply, `load(path)` reads."""

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    load: Callable[[Path], Imported]


IMPORTERS: list[Importer] = []


def register(importer: Importer) -> Importer:
    """Add (or replace, by name) an importer; returns it so modules can register at import."""
    IMPORTERS[:] = [i for i in IMPORTERS if i.name != importer.name]
    IMPORTERS.append(importer)
    return importer


def read_head(path: Path) -> bytes:
    """The first HEAD_BYTES of a file (b'' for a folder)."""
    if path.is_dir():
        return b""
    with open(path, "rb") as handle:
        return handle.read(HEAD_BYTES)


def known_formats() -> str:
    return "; ".join(i.description for i in IMPORTERS)


def importers_for(path: Path) -> list[Importer]:
    """Every importer whose sniff accepts the path; raises ImportRefused when none does."""
    if not path.exists():
        raise ImportRefused("no such file")
    try:
        head = read_head(path)
    except OSError as exc:
        raise ImportRefused(exc.strerror or str(exc)) from exc
    found = [i for i in IMPORTERS if i.sniff(path, head)]
    if not found:
        kind = "a folder" if path.is_dir() else "a file"
        raise ImportRefused(f"{kind} of no format tpuscope reads (it reads: {known_formats()})")
    return found


INT64 = (-(1 << 63), (1 << 63) - 1)


def check_rows(evidence: Imported) -> None:
    """Every row must fit its table's schema before anything is written: a number beyond
    int64 or a value of the wrong type refuses the file (ValueError naming the field),
    instead of failing half-way through writing the run."""
    from tpuscope.schema import TABLES

    for table, rows in evidence.rows.items():
        for row in rows:
            for name, value in row.items():
                if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
                    raise ValueError(
                        f"{name} {value} is out of range (beyond int64) in a {table} row"
                    )
        if table in TABLES and rows:
            try:
                pa.Table.from_pylist(rows, schema=TABLES[table])
            except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
                raise ValueError(f"a {table} row does not fit the table: {exc}") from None


def load(path: Path) -> list[tuple[Importer, Imported]]:
    """Read one path with every importer that accepts it; ImportRefused if none yields rows.

    Whatever an importer raises refuses the file for that importer, with the reason: one
    malformed file never stops the import of the others."""
    results = []
    errors = []
    for importer in importers_for(path):
        try:
            evidence = importer.load(path)
            check_rows(evidence)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            errors.append(f"{importer.description}: {exc}")
            continue
        except Exception as exc:  # a reader's bug on odd input: refuse the file, keep the rest
            errors.append(f"{importer.description}: {type(exc).__name__}: {exc}")
            continue
        if evidence.count() or evidence.meta:
            results.append((importer, evidence))
    if not results:
        raise ImportRefused("; ".join(errors) or "nothing readable in it")
    return results
