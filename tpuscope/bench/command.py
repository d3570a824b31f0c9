"""`tpuscope bench`: turn the command line into a BenchPlan, run it with progress, print the result.

Kept out of cli.py so the click function stays a few lines, and so `tpuscope
--help` never imports the harness.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tpuscope.bench.harness import BenchPlan, BenchResult, run_bench
from tpuscope.bench.models import MODELS, SIZES
from tpuscope.bench.script import ScriptError, parse_ref
from tpuscope.bench.spec import BACKENDS, MODES, WorkerSpec
from tpuscope.report.renderers import renderer_for
from tpuscope.store import StoreError


class BenchUsageError(Exception):
    """Bad bench input: one line for the user, exit status 2."""


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """'a,b' -> ['a', 'b'] in the given order; 'all' -> every allowed value."""
    items = (
        list(allowed)
        if text.strip() == "all"
        else [x.strip() for x in text.split(",") if x.strip()]
    )
    unknown = [x for x in items if x not in allowed]
    if unknown or not items:
        raise BenchUsageError(
            f"unknown {what} {', '.join(unknown) or repr(text)}; "
            f"choose from {', '.join(allowed)} or 'all'"
        )
    return list(dict.fromkeys(items))


def make_plan(
    model: str,
    script: str | None,
    modes: str,
    backends: str | None,
    size: str,
    steps: int,
    warmup: int,
    repeats: int,
    store: Path,
    timeout: float,
) -> BenchPlan:
    """Validate everything before any process starts (bad input loses nothing)."""
    if size not in SIZES:
        raise BenchUsageError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    if script:
        try:
            path, factory = parse_ref(script)
        except ScriptError as exc:
            raise BenchUsageError(str(exc)) from exc
        script, model = f"{path}:{factory}", path.stem
    elif model not in MODELS:
        raise BenchUsageError(f"unknown model {model!r}; bundled models: {', '.join(MODELS)}")
    mode_list = parse_list(modes, MODES, "mode")
    backend_list = parse_list(
        backends or ("torch_xla,torch_tpu" if script else "all"), BACKENDS, "backend"
    )
    try:
        store.mkdir(parents=True, exist_ok=True)
        probe = store / ".tpuscope-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BenchUsageError(f"cannot write to the store {store}: {exc.strerror or exc}") from exc
    return BenchPlan(
        model=model,
        script=script,
        modes=mode_list,
        backends=backend_list,
        size=size,
        steps=steps,
        warmup=warmup,
        repeats=repeats,
        store=str(store),
        timeout_s=timeout,
        command=shlex.join(["tpuscope", *sys.argv[1:]]),
    )


def _run_with_progress(plan: BenchPlan, quiet: bool) -> BenchResult:
    err = Console(stderr=True)
    if quiet or not err.is_terminal:
        return run_bench(plan)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("starting", total=None)

        def on_step(spec: WorkerSpec, done: int, total: int) -> None:
            bar.update(
                task,
                completed=done,
                total=total,
                description=f"{spec.model} {spec.backend} {spec.mode} (repeat {spec.repeat + 1})",
            )

        return run_bench(plan, progress=on_step)


def run_command(plan: BenchPlan, as_json: bool, markdown: bool, quiet: bool) -> int:
    """Run and print; exit status 1 when a mode that could run failed, else 0."""
    try:
        result = _run_with_progress(plan, quiet)
    except StoreError as exc:
        raise BenchUsageError(str(exc)) from exc
    out = Console()
    renderer_for("bench", "json" if as_json else "markdown" if markdown else "console").emit(
        result, out if out.is_terminal else Console(width=160)
    )
    failed = [r for r in result.rows if r["status"] == "error"]
    for row in failed:
        print(
            f"tpuscope: {row['backend']} {row['mode']} failed: {row.get('reason')}", file=sys.stderr
        )
    return 1 if failed else 0
