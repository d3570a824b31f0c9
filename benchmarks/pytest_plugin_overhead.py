"""Does installing tpuscope slow down a test suite that does not use it?

Runs the same 200 trivial tests with the plugin (loaded through its pytest11 entry
point, as every user gets it) and without it (`-p no:tpuscope`), alternating, several
times, in one go; prints the medians of each variant's wall time and CPU time (whole
`pytest` process, so the plugin's import counts; CPU time is the steadier figure on a
machine shared with other work) and of pytest's own session time, and their ratios.
Target: under 5% difference.

With --watched it also times `--tpuscope` over the same tests (every test watched:
the per-test price of the collection session, store round trip and analysis).

    python benchmarks/pytest_plugin_overhead.py --reps 15
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = 200
_SESSION_TIME = re.compile(r" in ([0-9.]+)s")


def write_suite(folder: Path, count: int) -> None:
    body = "\n\n".join(f"def test_{i}():\n    assert {i} + 1 > {i}" for i in range(count))
    (folder / "test_trivial.py").write_text(body + "\n")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(folder: Path, extra: list[str]) -> tuple[float, float, float]:
    """(process wall s, process CPU s, pytest's own session s) of one pytest run."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PT_XLA_DEBUG_LEVEL")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *extra,
        "test_trivial.py",
    ]
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    match = _SESSION_TIME.search(proc.stdout.strip().splitlines()[-1])
    return wall, cpu, float(match.group(1)) if match else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=11, help="runs of each variant (default 11)")
    parser.add_argument("--tests", type=int, default=TESTS, help=f"trivial tests (default {TESTS})")
    parser.add_argument("--watched", action="store_true", help="also time --tpuscope (all watched)")
    args = parser.parse_args()
    variants = {"with tpuscope": [], "without (-p no:tpuscope)": ["-p", "no:tpuscope"]}
    if args.watched:
        variants["--tpuscope (all watched)"] = ["--tpuscope"]
    with tempfile.TemporaryDirectory(prefix="tpuscope-bench-") as tmp:
        folder = Path(tmp)
        write_suite(folder, args.tests)
        for extra in variants.values():
            run_once(folder, extra)  # warm the file system and bytecode caches
        times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
        for _ in range(args.reps):  # alternate, so drifting machine load hits every variant alike
            for name, extra in variants.items():
                times[name].append(run_once(folder, extra))
    medians = {
        name: [statistics.median(run[i] for run in runs) for i in range(3)]
        for name, runs in times.items()
    }
    base = medians["without (-p no:tpuscope)"]
    print(
        f"{args.tests} trivial tests, {args.reps} runs each, alternating (medians; ratio to without):"
    )
    for name, (wall, cpu, session) in medians.items():
        print(
            f"  {name:<26} wall {wall:7.3f} s ({wall / base[0]:5.3f})   cpu {cpu:7.3f} s "
            f"({cpu / base[1]:5.3f})   session {session:6.3f} s ({session / base[2]:5.3f})"
        )
    for label, i in (("wall time", 0), ("CPU time", 1)):
        ratio = medians["with tpuscope"][i] / base[i]
        print(
            f"plugin installed but unused: {100 * (ratio - 1):+.1f}% {label} "
            f"({'within' if ratio < 1.05 else 'OVER'} the 5% target)"
        )
    if args.watched:
        watched = medians["--tpuscope (all watched)"][2]
        print(f"--tpuscope: {1e3 * (watched - base[2]) / args.tests:.1f} ms per watched test")


if __name__ == "__main__":
    main()
