"""The body of `tpuscope import`: import, report refused files, print the report or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tpuscope.ingest.run import ImportResult, import_paths
from tpuscope.store import RunStore, StoreError


def _import(runs: RunStore, paths: list[Path], name: str | None, quiet: bool) -> ImportResult:
    if quiet or not sys.stderr.isatty() or len(paths) < 2:
        return import_paths(paths, runs, name)
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        progress.add_task(f"importing {len(paths)} files", total=None)
        return import_paths(paths, runs, name)


def run_import(store: str, paths: list[Path], name: str | None, as_json: bool, quiet: bool) -> int:
    """Exit status: 0 when every file was imported, 2 when any was refused or nothing could be."""
    from tpuscope.detect.run_analysis import analyze
    from tpuscope.store import Run

    try:
        runs = RunStore(store)
        result = _import(runs, paths, name, quiet)
    except StoreError as exc:
        click.echo(f"tpuscope: {exc}", err=True)
        return 2
    for refused in result.refused:
        click.echo(f"tpuscope: cannot import {refused['path']}: {refused['reason']}", err=True)
    if result.skipped:
        names = ", ".join(Path(s["path"]).name for s in result.skipped[:10])
        more = f" and {len(result.skipped) - 10} more" if len(result.skipped) > 10 else ""
        click.echo(f"tpuscope: skipped {len(result.skipped)} text file(s) of no format tpuscope reads "
                   f"in the folder(s) given: {names}{more}", err=True)
    if result.run_dir is None:
        click.echo("tpuscope: nothing imported, no run made", err=True)
        return 2
    report = analyze(Run(result.run_dir))
    if as_json:
        from tpuscope.report.json_report import _clean

        payload = {"run_id": result.run_dir.name, "run_dir": str(result.run_dir),
                   "imported": result.imported, "refused": result.refused, "skipped": result.skipped, **report.to_dict()}
        click.echo(json.dumps(_clean(payload), indent=2, default=str))
    elif not quiet:
        from rich.console import Console

        from tpuscope.report.console import render

        render(report, Console())
    where = runs.close_run(result.run_dir)  # an object store: the stage is shipped now
    click.echo(f"tpuscope: imported {len(result.imported)} file(s) as {where} "
               f"(tpuscope show {result.run_dir.name} --store {store})", err=True)
    return 2 if result.refused else 0
