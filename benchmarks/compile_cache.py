"""What JAX's persistent compilation cache saves a restarted program: one program, three runs.

    python benchmarks/compile_cache.py [--json] [--keep DIR] [-- PROGRAM ARGS...]

Runs examples/jax_mlp.py (an MLP trained with Adam, its init outside `jit`; plain JAX) three
times under `tpuscope run` in a fresh temporary store: with the cache off, then twice with
JAX's persistent compilation cache on (through the environment: JAX_COMPILATION_CACHE_DIR, a
fresh folder, and JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 and
JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0, so every compile is written, on the CPU too). The
second run fills the cache, the third loads from it. Printed, one row per run: the compile
seconds (the run's compiles: trace, lower and backend compile, or load), the run's wall time
(tpuscope's `run_wall_s`), the command's whole time timed from outside (interpreter, JAX's
start, the device), what the cache did (as JAX's events said) and tpuscope's `compile_time`
card. `--json` prints the same rows as JSON.

Needs JAX and tpuscope only (no torch), so it runs unchanged on a bare TPU machine; on a TPU
v5e the three runs should take about two minutes (compiles of several seconds each; each run
is stopped after RUN_TIMEOUT_S). With no program arguments the program's defaults are used
(hidden 2048, one hidden layer, batch 256, 30 steps: about 20 ops of its init compile outside
`jit`, as in issue 41's 30-step MLP). Other program
arguments after `--` replace the defaults (e.g. `-- --hidden 64 --layers 1 --steps 5` on a
laptop's CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "jax_mlp.py"
NAME = "compile-cache"
CACHE_ENV = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}
RUN_TIMEOUT_S = 170  # one run; the three end within 3 minutes on a v5e (issue 41)
RUNS = (("cache off", False), ("cache on, 1st", True), ("cache on, 2nd", True))


def run_once(store: Path, cache: Path | None, program_args: list[str]) -> tuple[float, int]:
    """One `tpuscope run` of the program; its whole time and exit status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    if cache is not None:
        env.update(CACHE_ENV, JAX_COMPILATION_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-m", "tpuscope", "run", "--quiet", "--store", str(store)]
    cmd += ["--name", NAME, sys.executable, str(PROGRAM), *program_args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:  # stopped: its run is reported as far as it got
        print(f"tpuscope: a run took over {RUN_TIMEOUT_S} s and was stopped", file=sys.stderr)
        return time.perf_counter() - start, 124
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return elapsed, proc.returncode


def latest_row(store: Path, label: str, elapsed: float, status: int) -> dict[str, Any]:
    """The newest run's figures, as its one analysis wrote them."""
    from tpuscope.detect.run_analysis import current
    from tpuscope.store import Run, RunStore

    runs = RunStore(store).list_runs()
    report = current(Run(store / runs[0]["run_id"]))
    summary = report.summary
    card = next((f for f in report.findings if f.rule == "compile_time"), None)
    cache = summary.compile_cache or {}
    return {
        "run": label,
        "run_id": summary.run_id,
        "exit_code": status,
        "device": summary.device_kind,
        "compiles": summary.compiles,
        "compile_s": round(float(summary.compile_s or 0), 2),
        "run_wall_s": round(float(summary.run_wall_s or 0), 2),
        "command_s": round(elapsed, 2),
        "cache_hits": cache.get("hits", 0),
        "cache_written": cache.get("misses", 0),
        "card": None
        if card is None
        else {"severity": card.severity, "title": card.title, "fix": card.fix},
    }


def table(rows: list[dict[str, Any]]) -> None:
    """The rows as a table, then each run's card title and the first card's fix."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    out = Table(title="JAX persistent compilation cache: one program, three runs")
    for col in ("run", "compiles", "compile s", "run wall s", "command s", "cache", "card"):
        out.add_column(col)
    for r in rows:
        card = r["card"]
        out.add_row(
            r["run"],
            str(r["compiles"]),
            f"{r['compile_s']:.2f}",
            f"{r['run_wall_s']:.2f}",
            f"{r['command_s']:.2f}",
            f"{r['cache_hits']} loaded, {r['cache_written']} written",
            "none" if card is None else card["severity"],
        )
    console.print(out)
    for r in rows:
        title = r["card"]["title"] if r["card"] else "no compile_time card"
        console.print(f"{r['run']} ({r['run_id']}, {r['device']}): {title}", markup=False)
    fix = next((r["card"]["fix"] for r in rows if r["card"]), None)
    if fix:
        console.print(f"fix (first card): {fix}", markup=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--keep", type=Path, help="make the store and cache here and keep them")
    parser.add_argument("program_args", nargs="*", help="the program's arguments (after --)")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="compile-cache-", dir=args.keep))
    rows = []
    try:
        for label, cached in RUNS:
            elapsed, status = run_once(
                work / "store", work / "cache" if cached else None, args.program_args
            )
            rows.append(latest_row(work / "store", label, elapsed, status))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        table(rows)


if __name__ == "__main__":
    main()
