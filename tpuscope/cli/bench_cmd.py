"""`tpuscope bench`: the click shell over tpuscope/bench/command.py (which never loads for --help)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tpuscope.cli.options import fail, store_option


@click.command()
@store_option
@click.option(
    "--model",
    default="transformer",
    show_default=True,
    help="Bundled model: mlp, transformer (head_dim 64), transformer-hd128, varlen.",
)
@click.option(
    "--script",
    metavar="FILE.py:FACTORY",
    help="Your own model: FACTORY(device) returns (step, inputs); see docs/benchmarks.md.",
)
@click.option(
    "--modes",
    default="strict,fused,debug,compiled",
    show_default=True,
    help="Comma list of strict, fused, debug, compiled, dynamo (or 'all').",
)
@click.option(
    "--backends",
    default=None,
    help="Comma list of torch_xla, torch_tpu, jax (or 'all'). [default: all; torch ones with --script]",
)
@click.option(
    "--size",
    default="small",
    show_default=True,
    help="Shape preset of bundled models: tiny, small.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Measured steps per process, after warm-up.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Steps run first and not measured (compiles land here).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Fresh processes per mode; their spread is the noise.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800,
    show_default=True,
    help="Seconds one measurement process may take.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-mode results as a JSON list.")
@click.option("--markdown", is_flag=True, help="Print the comparison as a Markdown table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def bench(
    store: str,
    model: str,
    script: str | None,
    modes: str,
    backends: str | None,
    size: str,
    steps: int,
    warmup: int,
    repeats: int,
    timeout: float,
    as_json: bool,
    markdown: bool,
    quiet: bool,
) -> None:
    """Compare eager modes (strict, fused, debug, compiled) of one model, each in its own process.

    Every measurement is saved in the store as a run named bench-MODEL-BACKEND-MODE.

    \b
    Examples:
      tpuscope bench --model transformer --modes strict,fused,debug,compiled --steps 50 --repeats 3
      tpuscope bench --script my_model.py:make_step --modes strict,fused
      tpuscope bench --model mlp --backends jax --json
    """
    from tpuscope.bench.command import BenchUsageError, make_plan, run_command

    if "://" in store and not store.startswith("file://"):
        fail(f"tpuscope bench writes its runs to a local folder, not {store}: give --store DIR")
    store = store.removeprefix("file://")
    try:
        plan = make_plan(
            model, script, modes, backends, size, steps, warmup, repeats, Path(store), timeout
        )
        code = run_command(plan, as_json=as_json, markdown=markdown, quiet=quiet)
    except BenchUsageError as exc:
        fail(str(exc))
    sys.exit(code)
