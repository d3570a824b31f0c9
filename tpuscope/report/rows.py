"""A query's rows (`tpuscope query RUN "SQL"`): a rich table on the terminal, JSON records or CSV."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _numeric(table: pa.Table, name: str) -> bool:
    kind = table.schema.field(name).type
    return pa.types.is_floating(kind) or pa.types.is_integer(kind)


def render(table: pa.Table, console: Any) -> None:
    """The rows as a table, numbers right-aligned, and how many there are."""
    from rich.table import Table

    out = Table(show_edge=False, header_style="bold")
    for name in table.column_names:
        out.add_column(name, justify="right" if _numeric(table, name) else "left")
    for row in table.to_pylist():
        out.add_row(*(_cell(v) for v in row.values()))
    console.print(out)
    console.print(f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}", style="dim")


def json_text(table: pa.Table) -> str:
    return json.dumps(table.to_pylist(), indent=2, default=str) + "\n"


def csv_text(table: pa.Table) -> str:
    import pyarrow.csv as pacsv

    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes().decode()
