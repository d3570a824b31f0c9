"""`tpuscope import`: import, report refused files, print the report or JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tpuscope.cli.options import store_option

if TYPE_CHECKING:
    from tpuscope.ingest.run import ImportResult
    from tpuscope.store import RunStore


def _import(runs: RunStore, paths: list[Path], name: str | None, quiet: bool) -> ImportResult:
    from tpuscope.ingest.run import import_paths

    if quiet or not sys.stderr.isatty() or len(paths) < 2:
        return import_paths(paths, runs, name)
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        progress.add_task(f"importing {len(paths)} files", total=None)
        return import_paths(paths, runs, name)


def run_import(store: str, paths: list[Path], name: str | None, as_json: bool, quiet: bool) -> int:
    """Exit status: 0 when every file was imported, 2 when any was refused or nothing could be."""
    from tpuscope.detect.run_analysis import analyze
    from tpuscope.report.renderers import renderer_for
    from tpuscope.store import Run, RunStore, StoreError

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
        click.echo(
            f"tpuscope: skipped {len(result.skipped)} file(s) of no format tpuscope reads "
            f"in the folder(s) given: {names}{more}",
            err=True,
        )
    if result.run_dir is None:
        click.echo("tpuscope: nothing imported, no run made", err=True)
        return 2
    report = analyze(Run(result.run_dir))
    if as_json:
        payload = {
            "run_id": result.run_dir.name,
            "run_dir": str(result.run_dir),
            "imported": result.imported,
            "refused": result.refused,
            "skipped": result.skipped,
            **report.to_dict(),
        }
        renderer_for("import", "json").emit(payload)
    elif not quiet:
        renderer_for("report", "console").emit(report)
    where = runs.close_run(result.run_dir)  # an object store: the stage is shipped now
    click.echo(
        f"tpuscope: imported {len(result.imported)} file(s) as {where} "
        f"(tpuscope show {result.run_dir.name} --store {store})",
        err=True,
    )
    return 2 if result.refused else 0


@click.command(name="import")
@store_option
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--name", help="Run name (default: the first file's stem).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run, the files and the report as JSON."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no report.")
def import_(
    store: str, paths: tuple[Path, ...], name: str | None, as_json: bool, quiet: bool
) -> None:
    """Make a run from files you already have and report on it.

    All files and folders given go into one run. It reads:

    \b
      torch_xla metrics reports  metrics_report() text, PJRT or XRT era, alone or in a log
      PT_XLA_DEBUG logs          Compilation/Execution Analysis blocks, pt-xla-profiler notes
      profiler traces            *.xplane.pb (JAX, torch_xla, TorchTPU, TensorFlow), or a
                                 TensorBoard/xprof log folder of them
      xprof tool outputs         a folder of *hlo_stats*, *op_profile*, *overview_page* JSON
      XLA HLO text               an --xla_dump_to folder, or one module's text
      HloProto files             *.hlo_proto.pb, or a folder of them

    A file that cannot be read (no known format, a malformed line or number) is named on
    stderr, the others are still imported, and the exit status is 2; a file inside a given
    folder that no reader takes is named as skipped.

    \b
    Examples:
      tpuscope import metrics.txt pt_xla_debug.txt --name job-42
      tpuscope import logs/*.txt --json
    """
    sys.exit(run_import(store, list(paths), name, as_json, quiet))
