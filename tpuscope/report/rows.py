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
    if isinstance(value, list | tuple):  # a list column (a stack, a compile's shapes): its items
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return str(value)


def _numeric(table: pa.Table, name: str) -> bool:
    kind = table.schema.field(name).type
    return pa.types.is_floating(kind) or pa.types.is_integer(kind)


def render(table: pa.Table, console: Any) -> None:
    """The rows as a table, numbers right-aligned, and how many there are; one record per row
    where a text cell would be cut (every cell whole: a name, a `file:line`, a list)."""
    from tpuscope.report.fit import Col, grid, print_plain

    cols = [
        Col(
            name,
            whole=not _numeric(table, name),
            justify="right" if _numeric(table, name) else "left",
        )
        for name in table.column_names
    ]
    rows = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
    print_plain(
        console,
        grid(None, cols, rows, console.width, named=True, show_edge=False, header_style="bold"),
    )
    console.print(f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}", style="dim")


def json_text(table: pa.Table) -> str:
    return json.dumps(table.to_pylist(), indent=2, default=str) + "\n"


def _flat(column: pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A nested column (list, struct, map: a compile's shapes, a stack) as JSON text, which a CSV
    cell can hold; other columns as they are."""
    kind = column.type
    if not (
        pa.types.is_nested(kind)
        or pa.types.is_dictionary(kind)
        and pa.types.is_nested(kind.value_type)
    ):
        return column
    return pa.array(
        [None if v is None else json.dumps(v, default=str) for v in column.to_pylist()], pa.string()
    )


def csv_text(table: pa.Table) -> str:
    """The rows as CSV; a list or struct cell is its JSON text."""
    import pyarrow.csv as pacsv

    flat = pa.table({name: _flat(table.column(name)) for name in table.column_names})  # type: ignore[misc]  # chunked arrays too (stubs: not)
    sink = pa.BufferOutputStream()
    pacsv.write_csv(flat, sink)
    return sink.getvalue().to_pybytes().decode()
