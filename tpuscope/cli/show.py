"""The commands that read runs: `ls`, `show`, `trace`, `diff` and `dashboard`. Each resolves what
it shows and hands it to a renderer picked by name (tpuscope/report/renderers.py)."""

from __future__ import annotations

from pathlib import Path

import click

from tpuscope.cli.gate import diff_main, percent
from tpuscope.cli.options import fail, store_option
from tpuscope.store import RunStore, StoreError, layout


def _fmt(as_json: bool, default: str = "console") -> str:
    return "json" if as_json else default


@click.command(name="ls")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_runs(store: str, as_json: bool) -> None:
    """List the runs in the store, newest first.

    \b
    Example:
      tpuscope ls --store ./tpuscope-runs
    """
    from tpuscope.report.renderers import renderer_for
    from tpuscope.report.runs import with_briefs

    try:
        runs = with_briefs(RunStore(store).list_runs(), store)
    except StoreError as exc:
        fail(str(exc))
    if not runs and not as_json:
        click.echo(f"tpuscope: no runs in {store}", err=True)
        return
    renderer_for("runs", _fmt(as_json)).emit(runs)


@click.command()
@store_option
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print summary and findings as JSON.")
@click.option(
    "--reanalyze",
    is_flag=True,
    help="Run the detectors again and store the analysis in the run "
    "(without it, a run whose stored analysis is out of date is analysed without writing).",
)
def show(store: str, run_id: str, as_json: bool, reanalyze: bool) -> None:
    """Show the report of RUN_ID (a run id, a unique prefix, 'latest', or a run folder).

    \b
    Examples:
      tpuscope show latest
      tpuscope show train_transformer-20261129 --json
    """
    from tpuscope.detect.run_analysis import analyze
    from tpuscope.report.renderers import renderer_for
    from tpuscope.store import Run

    try:
        report = analyze(Run(RunStore(store).resolve(run_id)), redetect=reanalyze)
    except StoreError as exc:
        fail(str(exc))
    except OSError as exc:  # --reanalyze of a run in a read-only place
        fail(
            f"cannot store the analysis of {run_id}: {exc.strerror or exc}; `tpuscope show {run_id}` "
            "analyses it without storing"
        )
    why = report.summary.analysed_now
    if why and report.summary.status != "running":
        click.echo(
            f"tpuscope: analysed now, not stored ({why}); `tpuscope show {run_id} --reanalyze` "
            "stores it",
            err=True,
        )
    renderer_for("report", _fmt(as_json)).emit(report)


@click.command()
@store_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8050,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback exposes your runs to the network.",
)
def dashboard(store: str, port: int, host: str) -> None:
    """Serve the web dashboard over the run store and print its URL.

    \b
    Example:
      tpuscope dashboard --store ./tpuscope-runs --port 8050
    """
    from tpuscope.dashboards.serve import ServeError, serve

    try:
        serve(store, host=host, port=port)
    except ServeError as exc:
        fail(str(exc))


@click.command()
@store_option
@click.argument("run_id")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the Perfetto trace [default: <run>/trace/<run>.trace.json.gz].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the device view as JSON.")
def trace(store: str, run_id: str, output: Path | None, as_json: bool) -> None:
    """Show RUN_ID's device view and open its trace elsewhere: xprof, TensorBoard, Perfetto.

    Prints device busy/idle per device, xprof's measured MXU utilization and duty cycle
    (TPU traces), the TPU cost model's estimate next to each op's measured time (and the
    share of measured time within 2x; docs/cost_model.md), the command that opens the kept
    xplane files in xprof or TensorBoard, and writes a Chrome-trace JSON that
    ui.perfetto.dev opens.

    \b
    Examples:
      tpuscope run --trace-steps 10:20 python train.py
      tpuscope trace latest
      tpuscope import plugins/profile_logdir && tpuscope trace latest --json
      tpuscope import xprof_tool_outputs/ && tpuscope trace latest
    """
    from tpuscope.report.device import device_view
    from tpuscope.report.renderers import renderer_for
    from tpuscope.store import Run, read_table

    try:
        run_obj = Run(RunStore(store).resolve(run_id))
    except StoreError as exc:
        fail(str(exc))
    events = read_table(run_obj.path, "trace_events")
    if events.num_rows == 0 and run_obj.xprof_ops.empty:
        fail(
            f"run {run_obj.run_id} has no trace: capture one with `tpuscope run --trace-steps 10:20 ...` "
            "or `tpuscope import LOGDIR`"
        )
    view = device_view(run_obj)
    default = run_obj.path / layout.TRACE if run_obj.local else Path.cwd()  # a remote run: here
    if events.num_rows:
        target = output or default / f"{run_obj.run_id}.trace.json.gz"
        view["perfetto_trace"] = str(renderer_for("trace", "perfetto").write(events, target))
    renderer_for("device", _fmt(as_json)).emit(view)


@click.command()
@store_option
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--markdown", "as_markdown", is_flag=True, help="Print it as Markdown (a CI comment)."
)
@click.option(
    "--fail-on-regression",
    "regression_pct",
    type=percent,
    metavar="PCT",
    help="Exit 3 if B's median judged step time is worse by more than PCT (its whole "
    "interval) or B has a new high-severity finding.",
)
def diff(
    store: str,
    run_a: str,
    run_b: str,
    as_json: bool,
    as_markdown: bool,
    regression_pct: float | None,
) -> None:
    """What got better or worse from RUN_A to RUN_B: step time with an interval, compiles,
    fallbacks, findings new / gone / changed (docs/ci.md).

    \b
    Examples:
      tpuscope diff baseline-20261201 latest
      tpuscope diff baseline-20261201 latest --markdown > comment.md
      tpuscope diff baseline-20261201 latest --fail-on-regression 5%
    """
    diff_main(store, run_a, run_b, as_json, as_markdown, regression_pct)
