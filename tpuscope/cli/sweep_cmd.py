"""`tpuscope sweep`: every Hugging Face architecture through tpuscope (tpuscope/zoo/)."""

from __future__ import annotations

import json
import sys

import click

from tpuscope.cli.options import store_option
from tpuscope.zoo.catalog import TASKS  # a light module: transformers is imported on use

_SCENARIOS = ("train", "generate", "train-varlen", "eager", "tensorcore")
_TASKS = tuple(TASKS)


@click.command()
@store_option
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(_SCENARIOS),
    help="Scenario to run (repeatable; default: train and generate).",
)
@click.option(
    "--task",
    "tasks",
    multiple=True,
    type=click.Choice(_TASKS),
    help="Task of transformers' auto mappings (repeatable; default: all, causal LM first).",
)
@click.option(
    "--only",
    multiple=True,
    metavar="GLOB",
    help="Model types to run (globs, comma-separated or repeated); one that matches no model type "
    "is refused (exit 2) naming the closest.",
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="GLOB",
    help="Model types to leave out (globs, comma-separated or repeated).",
)
@click.option(
    "-j", "--jobs", default=1, show_default=True, help="Cells run at once (each its own process)."
)
@click.option(
    "--shard", metavar="K/N", help="Run every N-th cell from the K-th (N machines, one store)."
)
@click.option("--timeout", default=900.0, show_default=True, help="Seconds a cell may run.")
@click.option(
    "--target",
    default="v5e",
    show_default=True,
    type=click.Choice(["v4", "v5e", "v5p", "v6e", "v7"]),
    help="TPU generation the tensorcore scenario's lint judges the real widths for.",
)
@click.option(
    "--retry",
    multiple=True,
    metavar="STATUS",
    help="Run again the finished cells with this status (error, crash, timeout, ...).",
)
@click.option("--list", "list_only", is_flag=True, help="List the cells the sweep covers and exit.")
@click.option(
    "--table", "table_only", is_flag=True, help="Print the table of what already ran; run nothing."
)
@click.option(
    "--earlier",
    "earlier_csv",
    type=click.Path(exists=True, dir_okay=False),
    help="An earlier sweep's cells.csv (a store not kept, another machine's): its cells count as "
    "finished (not run again) and join the table where this store has not run them.",
)
@click.option("--json", "fmt", flag_value="json", help="Print the table as JSON.")
@click.option("--markdown", "fmt", flag_value="markdown", help="Print the table as Markdown.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def sweep(
    store: str,
    scenarios: tuple[str, ...],
    tasks: tuple[str, ...],
    only: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int,
    shard: str | None,
    timeout: float,
    target: str,
    retry: tuple[str, ...],
    list_only: bool,
    table_only: bool,
    earlier_csv: str | None,
    fmt: str | None,
    quiet: bool,
) -> None:
    """Run Hugging Face model types (tiny random-weight models from their own configs) through
    tpuscope on torch_xla, one run per model type and scenario (`zoo/<type>/<scenario>`), each
    checked against the runtime's own counters. Finished cells are skipped (resume).

    \b
    Examples:
      tpuscope sweep --store /data/zoo --task causal-lm --only 'llama*' --only gpt2 -j 2
      tpuscope sweep --store gs://b/zoo --shard 2/4       # this machine's quarter
      tpuscope sweep --store /data/zoo --table --markdown  # what ran so far
      tpuscope sweep --store /data/zoo --table --markdown --earlier docs/zoo/cells.csv
      tpuscope sweep --store /data/zoo --scenario tensorcore --target v6e --only llama
    """
    from tpuscope.zoo import catalog, table
    from tpuscope.zoo.driver import parse_shard, plan, run_sweep

    try:
        cut = parse_shard(shard)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    chosen = scenarios or ("train", "generate")
    only, exclude = tuple(catalog.patterns(only)), tuple(catalog.patterns(exclude))
    if only and not table_only:
        _refuse_unmatched(only, tasks)
    if list_only:
        for entry, scenario in plan(chosen, tasks or None, only, exclude, cut):
            click.echo(f"{entry.model_type}\t{scenario}\t{entry.task}\t{entry.class_name}")
        return
    earlier = table.load_earlier(earlier_csv) if earlier_csv else None
    if table_only:
        records = table.load_records(store)
    else:
        records = run_sweep(
            store,
            chosen,
            tasks or None,
            only,
            exclude,
            jobs,
            cut,
            timeout,
            retry,
            progress=None if not quiet else False,
            target=target,
            earlier=earlier or (),
        )
        table.write_outputs(store)
    if fmt == "json":
        click.echo(json.dumps(table.to_json(records, earlier), indent=1, default=str))
    elif fmt == "markdown":
        click.echo(table.markdown(records, earlier))
    else:
        click.echo(table.markdown_summary(table.summarize(records, earlier)))
    sys.stdout.flush()


def _refuse_unmatched(only: tuple[str, ...], tasks: tuple[str, ...]) -> None:
    """A `--only` glob that matches no model type of the tasks asked for is a usage error
    (exit 2), naming the closest types: a typo would otherwise run or list nothing, exit 0."""
    from tpuscope.zoo import catalog

    missing = catalog.unmatched(catalog.entries(tasks or None), only)
    if not missing:
        return
    scope = f" of the task(s) {', '.join(tasks)}" if tasks else ""
    lines = [
        f"--only {pattern!r} matches no model type{scope}"
        + (f"; closest: {', '.join(close)}" if close else "; `tpuscope sweep --list` lists them")
        for pattern, close in missing.items()
    ]
    raise click.UsageError("\n".join(lines))
