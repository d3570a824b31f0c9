"""`tpuscope query RUN "SQL"` (DuckDB over a run's tables, printed as a table, JSON or CSV) and
`tpuscope compact RUN`."""

from __future__ import annotations

import sys

import click

from tpuscope.cli.options import store_option


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
    from tpuscope.report.renderers import renderer_for

    renderer_for("rows", fmt).emit(result)
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


@click.command()
@store_option
@click.argument("run_id")
@click.argument("sql")
@click.option("--json", "fmt", flag_value="json", help="Print the rows as a JSON list.")
@click.option("--csv", "fmt", flag_value="csv", help="Print the rows as CSV.")
def query(store: str, run_id: str, sql: str, fmt: str | None) -> None:
    """Run SQL (DuckDB) over RUN_ID's tables, each a view named after it: steps, metrics,
    compiles, fallbacks, findings, ... (docs/store.md).

    \b
    Examples:
      tpuscope query latest "SELECT host, median(wall_ns)/1e6 AS p50_ms FROM steps GROUP BY host"
      tpuscope query exp42 "SELECT op, sum(count) AS n FROM fallbacks GROUP BY op" --json
      tpuscope query exp42 "SELECT * FROM compiles" --csv --store gs://my-bucket/tpuscope
    """
    sys.exit(query_main(store, run_id, sql, fmt or "table"))


@click.command()
@store_option
@click.argument("run_id")
def compact(store: str, run_id: str) -> None:
    """Merge RUN_ID's part files into one per table (as `tpuscope run` does when a run ends;
    for imported runs, runs written by other tools, or leftovers of a merge that was killed).

    \b
    Example:
      tpuscope compact exp42 --store gs://my-bucket/tpuscope
    """
    sys.exit(compact_main(store, run_id))
