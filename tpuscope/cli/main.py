"""The `tpuscope` command: a thin click shell over the library."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tpuscope.cli.gate import diff_main, gate_options, judge_run, percent
from tpuscope.store import RunStore, StoreError, layout

if TYPE_CHECKING:
    from tpuscope.analyze.gate import Policy
    from tpuscope.detect.run_analysis import RunReport

_store_option = click.option(
    "--store", metavar="DIR|URL", envvar="TPUSCOPE_STORE", default="./tpuscope-runs", show_default=True,
    help="Run store: a folder or an fsspec URL such as gs://bucket/runs or s3://bucket/runs "
         "(env TPUSCOPE_STORE).",
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
@click.option("--trace-steps", metavar="A:B",
              help="Capture a profiler trace (xplane.pb) of steps A..B-1, kept in the run and ingested.")
@click.option("--target", default="v5e", show_default=True, metavar="v5e|v5p|v6e|v7",
              help="TPU generation the TensorCore (MXU) estimates are made for.")
@click.option("--alerts", type=click.Choice(["on", "off"]), default=None,
              help="Say each new recompile or CPU fallback on stderr while PROGRAM runs, once "
                   "(docs/alerts.md).  [default: on; off with --quiet]")
@click.option("--run-id", envvar="TPUSCOPE_RUN_ID", metavar="ID",
              help="Join the run ID (env TPUSCOPE_RUN_ID): every host of a pod run with the same ID "
                   "writes one run, each its own files (docs/pods.md).")
@click.option("--quiet", "-q", is_flag=True, help="No report at the end and no live alerts.")
@gate_options
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def run(store: str, name: str | None, warmup: int, deep: bool, trace_steps: str | None, target: str,
        alerts: str | None, run_id: str | None, quiet: bool, policy: Policy, program: tuple[str, ...]) -> None:
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
        run_dir, code = run_program(prog, runs, name=name, warmup=warmup, deep=deep,
                                    trace_steps=trace_steps, target=target,
                                    alerts=alerts == "on" if alerts else not quiet, run_id=run_id)
    except StartError as exc:
        fail(str(exc), exc.code)
    except (UsageError, StoreError) as exc:
        fail(str(exc))
    report = _report_run(run_dir, quiet, policy.active) if run_dir is not None else None
    if run_dir is not None:
        _say_saved(runs.close_run(run_dir), run_dir.name, store, quiet)
    exit_as(judge_run(code, report, policy))


def _report_run(run_dir: Path, quiet: bool, judged: bool = False) -> RunReport | None:
    """Analyse and print the finished run; a failure here (full disk, Ctrl-C) is one line and
    never changes the exit status, which stays the program's (or 4 when a limit was set).
    A run without rows (the program ran no backend) is not analysed unless limits are to be
    judged: loading the analysis stack would be most of its cost (`show` analyses it later);
    nor is a pod whose other hosts still run (the last host to end analyses it)."""
    from tpuscope.store.buffer import has_parts
    from tpuscope.store.hosts import hosts_running

    report = None
    if not judged and not has_parts(run_dir):
        if not quiet:
            click.echo("tpuscope: no rows recorded: the program ran no torch_xla, JAX or TorchTPU step",
                       err=True)
    elif not judged and (running := hosts_running(run_dir)):  # a pod: the last host analyses it
        if not quiet:
            click.echo(f"tpuscope: {len(running)} other host(s) of the pod still run "
                       f"({', '.join(running[:3])}{', ...' if len(running) > 3 else ''}): the last to "
                       f"end analyses the pod (or: tpuscope show {run_dir.name})", err=True)
    else:
        report = _analyze_and_render(run_dir, quiet)
    return report


def _analyze_and_render(run_dir: Path, quiet: bool) -> RunReport | None:
    report = None
    try:
        from rich.console import Console

        from tpuscope.detect.run_analysis import analyze
        from tpuscope.report.console import render
        from tpuscope.store import Run

        report = analyze(Run(run_dir))
        if not quiet:
            note = backend_note(report.summary, Run(run_dir).meta)
            if note:
                click.echo(f"tpuscope: {note}", err=True)
            render(report, Console(stderr=True))
    except KeyboardInterrupt:
        click.echo("tpuscope: report skipped (interrupted)", err=True)
    except Exception as exc:
        click.echo(f"tpuscope: no report: {type(exc).__name__}: {exc}", err=True)
    return report


def _say_saved(where: object, run_id: str, store: str, quiet: bool) -> None:
    if not quiet:
        click.echo(f"tpuscope: run saved as {where}  (tpuscope show {run_id} --store {store})", err=True)
        click.echo(f"tpuscope: open it in the browser: tpuscope dashboard --store {store}", err=True)


def backend_note(summary: dict, meta: dict) -> str | None:
    """What tpuscope chose for the program's backend, said only for the backend that ran."""
    if summary.get("backend") == "torch_xla" and (meta.get("env_set") or {}).get("PJRT_DEVICE") == "CPU":
        return "no TPU found: torch_xla ran on the CPU (PJRT_DEVICE=CPU, set by tpuscope)"
    return None


@main.command(name="ls")
@_store_option
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_runs(store: str, as_json: bool) -> None:
    """List the runs in the store, newest first.

    \b
    Example:
      tpuscope ls --store ./tpuscope-runs
    """
    import json

    from tpuscope.report.runs import runs_table, with_briefs

    try:
        runs = with_briefs(RunStore(store).list_runs(), store)
    except StoreError as exc:
        fail(str(exc))
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
def show(store: str, run_id: str, as_json: bool, reanalyze: bool) -> None:
    """Show the report of RUN_ID (a run id, a unique prefix, 'latest', or a run folder).

    \b
    Examples:
      tpuscope show latest
      tpuscope show train_transformer-20261129 --json
    """
    from rich.console import Console

    from tpuscope.detect.run_analysis import analyze
    from tpuscope.report.console import render
    from tpuscope.report.json_report import to_json
    from tpuscope.store import Run

    try:
        run_obj = Run(RunStore(store).resolve(run_id))
        report = analyze(run_obj, redetect=reanalyze)
    except StoreError as exc:
        fail(str(exc))
    if as_json:
        click.echo(to_json(report))
    else:
        render(report, Console())


@main.command()
@_store_option
@click.option("--port", type=click.IntRange(0, 65535), default=8050, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback exposes your runs to the network.")
def dashboard(store: str, port: int, host: str) -> None:
    """Serve the web dashboard over the run store and print its URL.

    \b
    Example:
      tpuscope dashboard --store ./tpuscope-runs --port 8050
    """
    from tpuscope_dashboards.serve import ServeError, serve

    try:
        serve(store, host=host, port=port)
    except ServeError as exc:
        fail(str(exc))


@main.command()
@_store_option
@click.option("--model", default="transformer", show_default=True,
              help="Bundled model: mlp, transformer (head_dim 64), transformer-hd128, varlen.")
@click.option("--script", metavar="FILE.py:FACTORY",
              help="Your own model: FACTORY(device) returns (step, inputs); see docs/benchmarks.md.")
@click.option("--modes", default="strict,fused,debug,compiled", show_default=True,
              help="Comma list of strict, fused, debug, compiled, dynamo (or 'all').")
@click.option("--backends", default=None,
              help="Comma list of torch_xla, torch_tpu, jax (or 'all'). [default: all; torch ones with --script]")
@click.option("--size", default="small", show_default=True, help="Shape preset of bundled models: tiny, small.")
@click.option("--steps", type=click.IntRange(min=1), default=30, show_default=True,
              help="Measured steps per process, after warm-up.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Steps run first and not measured (compiles land here).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="Fresh processes per mode; their spread is the noise.")
@click.option("--timeout", type=click.FloatRange(min=1), default=1800, show_default=True,
              help="Seconds one measurement process may take.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-mode results as a JSON list.")
@click.option("--markdown", is_flag=True, help="Print the comparison as a Markdown table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def bench(store: str, model: str, script: str | None, modes: str, backends: str | None, size: str,
          steps: int, warmup: int, repeats: int, timeout: float, as_json: bool, markdown: bool,
          quiet: bool) -> None:
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
        plan = make_plan(model, script, modes, backends, size, steps, warmup, repeats, Path(store), timeout)
        code = run_command(plan, as_json=as_json, markdown=markdown, quiet=quiet)
    except BenchUsageError as exc:
        fail(str(exc))
    sys.exit(code)


@main.command(name="import")
@_store_option
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--name", help="Run name (default: the first file's stem).")
@click.option("--json", "as_json", is_flag=True, help="Print the run, the files and the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no report.")
def import_(store: str, paths: tuple[Path, ...], name: str | None, as_json: bool, quiet: bool) -> None:
    """Make a run from files you already have and report on it.

    Reads torch_xla metrics reports (metrics_report() text, also inside a log) and
    PT_XLA_DEBUG logs; all files go into one run. A file of no known format is
    named on stderr, the others are still imported, and the exit status is 2.

    \b
    Examples:
      tpuscope import metrics.txt pt_xla_debug.txt --name job-42
      tpuscope import logs/*.txt --json
    """
    from tpuscope.cli.import_cmd import run_import

    sys.exit(run_import(store, list(paths), name, as_json, quiet))



@main.command()
@_store_option
@click.argument("run_id")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the Perfetto trace [default: <run>/trace/<run>.trace.json.gz].")
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
    import json

    from rich.console import Console

    from tpuscope.report.device import device_view, render
    from tpuscope.report.perfetto import write_chrome_trace
    from tpuscope.store import Run, read_table

    try:
        run_obj = Run(RunStore(store).resolve(run_id))
    except StoreError as exc:
        fail(str(exc))
    events = read_table(run_obj.path, "trace_events")
    if events.num_rows == 0 and run_obj.xprof_ops.empty:
        fail(f"run {run_obj.run_id} has no trace: capture one with `tpuscope run --trace-steps 10:20 ...` "
             "or `tpuscope import LOGDIR`")
    view = device_view(run_obj)
    default = run_obj.path / layout.TRACE if run_obj.local else Path.cwd()  # a remote run: here
    target = output or default / f"{run_obj.run_id}.trace.json.gz"
    if events.num_rows:
        view["perfetto_trace"] = str(target)
        write_chrome_trace(events, target)
    if as_json:
        click.echo(json.dumps(view, indent=2, default=str))
        return
    console = Console()
    render(view, console)
    for logdir in view["log_dirs"]:
        console.print(f"xprof:       xprof --logdir {logdir} --port 8791   (then open http://localhost:8791)",
                      soft_wrap=True)
        console.print(f"TensorBoard: tensorboard --logdir {logdir}   (Profile tab; needs the xprof plugin)",
                      soft_wrap=True)
    if events.num_rows:
        console.print(f"Perfetto:    open https://ui.perfetto.dev, 'Open trace file', pick {target}", soft_wrap=True)


@main.command()
@_store_option
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print it as Markdown (a CI comment).")
@click.option("--fail-on-regression", "regression_pct", type=percent, metavar="PCT",
              help="Exit 3 if B's median judged step time is worse by more than PCT (its whole "
                   "interval) or B has a new high-severity finding.")
def diff(store: str, run_a: str, run_b: str, as_json: bool, as_markdown: bool,
         regression_pct: float | None) -> None:
    """What got better or worse from RUN_A to RUN_B: step time with an interval, compiles,
    fallbacks, findings new / gone / changed (docs/ci.md).

    \b
    Examples:
      tpuscope diff baseline-20261201 latest
      tpuscope diff baseline-20261201 latest --markdown > comment.md
      tpuscope diff baseline-20261201 latest --fail-on-regression 5%
    """
    diff_main(store, run_a, run_b, as_json, as_markdown, regression_pct)


@main.command()
@_store_option
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
    from tpuscope.cli.query import query_main

    sys.exit(query_main(store, run_id, sql, fmt or "table"))


@main.command()
@_store_option
@click.argument("run_id")
def compact(store: str, run_id: str) -> None:
    """Merge RUN_ID's part files into one per table (as `tpuscope run` does when a run ends;
    for imported runs, runs written by other tools, or leftovers of a merge that was killed).

    \b
    Example:
      tpuscope compact exp42 --store gs://my-bucket/tpuscope
    """
    from tpuscope.cli.query import compact_main

    sys.exit(compact_main(store, run_id))


if __name__ == "__main__":
    main()
