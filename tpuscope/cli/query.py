"""`tpuscope query RUN "SQL"` (DuckDB over a run's tables, printed as a table, JSON or CSV) and
`tpuscope compact RUN`."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import pyarrow as pa


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render(table: pa.Table, fmt: str) -> None:
    """Print a result: a rich table (terminal), JSON records or CSV."""
    if fmt == "json":
        click.echo(json.dumps(table.to_pylist(), indent=2, default=str))
        return
    if fmt == "csv":
        import pyarrow.csv as pacsv

        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink)
        sys.stdout.write(sink.getvalue().to_pybytes().decode())
        return
    from rich.console import Console
    from rich.table import Table

    out = Table(show_edge=False, header_style="bold")
    for name in table.column_names:
        out.add_column(
            name,
            justify="right"
            if pa.types.is_floating(table.schema.field(name).type)
            or pa.types.is_integer(table.schema.field(name).type)
            else "left",
        )
    for row in table.to_pylist():
        out.add_row(*(_cell(v) for v in row.values()))
    console = Console()
    console.print(out)
    console.print(f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}", style="dim")


def query_main(store: str, run_id: str, statement: str, fmt: str) -> int:
    """Resolve the run, run the SQL, print; a bad run or SQL is one line and exit status 2."""
    import duckdb

    from tpuscope.store import Run, RunStore, StoreError

    try:
        run = Run(RunStore(store).resolve(run_id))
        result = run.query(statement)
    except StoreError as exc:
        click.echo(f"tpuscope: {exc}", err=True)
        return 2
    except duckdb.Error as exc:
        click.echo(f"tpuscope: the query failed: {str(exc).splitlines()[0]}", err=True)
        return 2
    render(result, fmt)
    return 0


def compact_main(store: str, run_id: str) -> int:
    from tpuscope.store import Run, RunStore, StoreError
    from tpuscope.store.ship import host_tag

    try:
        run = Run(RunStore(store).resolve(run_id))
    except StoreError as exc:
        click.echo(f"tpuscope: {exc}", err=True)
        return 2
    removed = run.compact(host_tag())
    click.echo(f"tpuscope: merged {removed} part file(s) of {run.loc}", err=True)
    return 0
