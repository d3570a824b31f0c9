"""The `tpuscope` command: a thin click shell over the library."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tpuscope.store import RunStore, StoreError

_store_option = click.option(
    "--store", type=click.Path(file_okay=False, path_type=Path), envvar="TPUSCOPE_STORE",
    default="./tpuscope-runs", show_default=True, help="Run store folder (env TPUSCOPE_STORE).",
)


def fail(message: str, code: int = 2) -> None:
    click.echo(f"tpuscope: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuscope", message="tpuscope %(version)s")
def main() -> None:
    """Profile XLA programs (PyTorch/XLA, TorchTPU, JAX) and name the line to change.

    \b
    Example:
      tpuscope run python train.py --lr 3e-4
      tpuscope show latest
    """


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_store_option
@click.option("--name", help="Run name (default: the script's file stem).")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True,
              help="Steps not judged.")
@click.option("--deep", is_flag=True,
              help="Per-execution analysis, HLO dumps into the run folder, IR/HLO source metadata.")
@click.option("--quiet", "-q", is_flag=True, help="No report at the end.")
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def run(store: Path, name: str | None, warmup: int, deep: bool, quiet: bool, program: tuple[str, ...]) -> None:
    """Run PROGRAM unchanged under tpuscope, then print the report.

    \b
    Examples:
      tpuscope run python train.py --lr 3e-4
      tpuscope run train.py
      tpuscope run -m mypkg.train
      tpuscope run --warmup 3 --deep python -c "import train; train.main()"
    """
    from rich.console import Console

    from tpuscope.analysis import analyze
    from tpuscope.report.console import render
    from tpuscope.runner import UsageError, resolve_program, run_program
    from tpuscope.store import Run

    try:
        prog = resolve_program(list(program))
        run_dir, code = run_program(prog, RunStore(store), name=name, warmup=warmup, deep=deep)
    except (UsageError, StoreError) as exc:
        fail(str(exc))
    report = analyze(Run(run_dir))
    if not quiet:
        render(report, Console(stderr=True))
        click.echo(f"tpuscope: run saved as {run_dir}  (tpuscope show {run_dir.name} --store {store})", err=True)
    sys.exit(code)


@main.command(name="ls")
@_store_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_runs(store: Path, as_json: bool) -> None:
    """List the runs in the store, newest first.

    \b
    Example:
      tpuscope ls --store ./tpuscope-runs
    """
    import json

    from tpuscope.report.runs import runs_table

    runs = RunStore(store).list_runs()
    if as_json:
        click.echo(json.dumps(runs, indent=2, default=str))
        return
    from rich.console import Console

    if not runs:
        click.echo(f"tpuscope: no runs in {store}", err=True)
        return
    Console().print(runs_table(runs))


@main.command()
@_store_option
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print summary and findings as JSON.")
@click.option("--reanalyze", is_flag=True, help="Run the detectors again before showing.")
def show(store: Path, run_id: str, as_json: bool, reanalyze: bool) -> None:
    """Show the report of RUN_ID (a run id, a unique prefix, 'latest', or a run folder).

    \b
    Examples:
      tpuscope show latest
      tpuscope show train_transformer-20261129 --json
    """
    from rich.console import Console

    from tpuscope.analysis import analyze
    from tpuscope.report.console import render
    from tpuscope.report.json_report import to_json
    from tpuscope.store import Run

    try:
        run_obj = Run(RunStore(store).resolve(run_id))
    except StoreError as exc:
        fail(str(exc))
    report = analyze(run_obj, redetect=reanalyze)
    if as_json:
        click.echo(to_json(report))
    else:
        render(report, Console())


if __name__ == "__main__":
    main()
