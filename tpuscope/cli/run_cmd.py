"""`tpuscope run PROGRAM`: run it under tpuscope, report on it, judge its limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tpuscope.cli.gate import gate_options, judge_run
from tpuscope.cli.options import fail, store_option
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import RunStore, StoreError

if TYPE_CHECKING:
    from tpuscope.analyze.contract import RunSummary
    from tpuscope.analyze.gate import Policy
    from tpuscope.launch.lifecycle import Ending


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@store_option
@click.option("--name", help="Run name (default: the script's file stem).")
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=DEFAULT_WARMUP,
    show_default=True,
    help="Steps not judged.",
)
@click.option(
    "--deep",
    is_flag=True,
    help="HLO dumps into the run folder: per-graph input shapes and each op's Python line "
    "(captured while graphs are new: docs/store.md).",
)
@click.option(
    "--trace-steps",
    metavar="A:B|auto|off",
    help="Capture a profiler trace (xplane.pb) of steps A..B-1, kept in the run and ingested. "
    "[default: auto: on a TPU, the 5 steps after the warm-up, so TensorCore verdicts are measured]",
)
@click.option(
    "--target",
    default="v5e",
    show_default=True,
    metavar="v5e|v5p|v6e|v7",
    help="TPU generation the TensorCore (MXU) estimates are made for.",
)
@click.option(
    "--alerts",
    type=click.Choice(["on", "off"]),
    default=None,
    help="Say each new recompile or CPU fallback on stderr while PROGRAM runs, once "
    "(docs/alerts.md).  [default: on; off with --quiet]",
)
@click.option(
    "--run-id",
    envvar="TPUSCOPE_RUN_ID",
    metavar="ID",
    help="Join the run ID (env TPUSCOPE_RUN_ID): every host of a pod run with the same ID "
    "writes one run, each its own files (docs/pods.md).",
)
@click.option("--quiet", "-q", is_flag=True, help="No report at the end and no live alerts.")
@gate_options
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    store: str,
    name: str | None,
    warmup: int,
    deep: bool,
    trace_steps: str | None,
    target: str,
    alerts: str | None,
    run_id: str | None,
    quiet: bool,
    policy: Policy,
    program: tuple[str, ...],
) -> None:
    """Run PROGRAM unchanged under tpuscope, then print the report.

    While it runs, each new problem (a recompile, a CPU fallback) is said once on stderr,
    `tpuscope: step 812: recompile of the graph from train.py:44 (3.1 s): ...`, judged as
    the report judges it; a storm is summed up in one line every 10 s or more.

    Exit status: the program's own (killed by a signal: tpuscope ends by the same signal);
    127 if PROGRAM cannot be found, 126 if it cannot be run, 2 for a bad command line.
    When PROGRAM exits 0: 3 if a --fail-on / --max-* limit is exceeded (one `tpuscope:`
    line on stderr says why), 4 if a limit was set but the run could not be analysed
    (docs/ci.md). Signals sent to tpuscope (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are
    passed on to PROGRAM.

    \b
    Examples:
      tpuscope run python train.py --lr 3e-4
      tpuscope run train.py
      tpuscope run -m mypkg.train
      tpuscope run --warmup 3 --deep python -c "import train; train.main()"
      tpuscope run --trace-steps 10:20 --deep --target v6e python train.py
      tpuscope run --fail-on recompile,cpu_fallback --fail-severity medium python train.py
      tpuscope run --max-recompiles 2 --max-fallbacks 0 --allow-fallbacks nonzero python train.py
      tpuscope run --alerts off python train.py
      tpuscope run --run-id exp42 python train.py     # on every host of a pod: one run
    """
    from tpuscope.launch.program import StartError, UsageError, resolve_program, run_program
    from tpuscope.launch.signals import exit_as

    try:
        prog = resolve_program(list(program))
        runs = RunStore(store)
        ending, code = run_program(
            prog,
            runs,
            name=name,
            warmup=warmup,
            deep=deep,
            trace_steps=trace_steps,
            target=target,
            alerts=alerts == "on" if alerts else not quiet,
            run_id=run_id,
            analysis=True if policy.active else None,  # limits need it
            show=None if quiet else _show,
        )
    except StartError as exc:
        fail(str(exc), exc.code)
    except (UsageError, StoreError) as exc:
        fail(str(exc))
    if ending is not None:
        _say_failure(ending.error)
        _say_saved(ending.where, ending.run_dir.name, store, quiet)
    exit_as(judge_run(code, ending.report if ending is not None else None, policy))


def _show(ending: Ending) -> None:
    """The finished run on the terminal: its report, or why there is none yet."""
    if ending.skipped == "no rows":
        click.echo(
            "tpuscope: no rows recorded: the program ran no torch_xla, JAX or TorchTPU step",
            err=True,
        )
    elif ending.skipped == "hosts running":
        running = ending.running
        click.echo(
            f"tpuscope: {len(running)} other host(s) of the pod still run "
            f"({', '.join(running[:3])}{', ...' if len(running) > 3 else ''}): the last to "
            f"end analyses the pod (or: tpuscope show {ending.run_dir.name})",
            err=True,
        )
    elif ending.report is not None and ending.run is not None:
        from rich.console import Console

        from tpuscope.report.renderers import renderer_for

        note = backend_note(ending.report.summary, ending.run.meta)
        if note:
            click.echo(f"tpuscope: {note}", err=True)
        renderer_for("report", "console").emit(ending.report, Console(stderr=True))


def _say_failure(error: BaseException | None) -> None:
    """A failed analysis or report is one line; it never changes the exit status, which stays
    the program's (or 4 when a limit was set)."""
    if isinstance(error, KeyboardInterrupt):
        click.echo("tpuscope: report skipped (interrupted)", err=True)
    elif error is not None:
        click.echo(f"tpuscope: no report: {type(error).__name__}: {error}", err=True)


def _say_saved(where: object, run_id: str, store: str, quiet: bool) -> None:
    if not quiet:
        click.echo(
            f"tpuscope: run saved as {where}  (tpuscope show {run_id} --store {store})", err=True
        )
        click.echo(
            f"tpuscope: open it in the browser: tpuscope dashboard --store {store}", err=True
        )


def backend_note(summary: RunSummary, meta: dict) -> str | None:
    """What tpuscope chose for the program's backend, said only for the backend that ran."""
    if summary.backend == "torch_xla" and (meta.get("env_set") or {}).get("PJRT_DEVICE") == "CPU":
        return "no TPU found: torch_xla ran on the CPU (PJRT_DEVICE=CPU, set by tpuscope)"
    return None
