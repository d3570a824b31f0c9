"""Step time with and without tpuscope, alternating runs in one go; prints the median ratio.

    python benchmarks/overhead.py [--reps 5] [--steps 60] [--deep]

Each repetition runs benchmarks/timed_steps.py bare, then under `tpuscope run`
(default mode, and with --deep also under `tpuscope run --deep`). The program times
its own steps; the first 10 steps of each run (compiles) are dropped. Target for the
default mode: median ratio <= 1.02.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "timed_steps.py"
SKIP = 10


def run_once(mode: str, steps: int, work: Path) -> float:
    out = work / f"{mode}-{len(list(work.iterdir()))}.json"
    program = ["python", str(PROGRAM), str(out), "--steps", str(steps)]
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    if mode == "bare":
        cmd = program
    else:
        extra = ["--deep"] if mode == "deep" else []
        cmd = [sys.executable, "-m", "tpuscope", "run", "--quiet", "--store", str(work / "store"), *extra, *program]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return statistics.median(json.loads(out.read_text())[SKIP:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--deep", action="store_true", help="also measure tpuscope run --deep")
    args = parser.parse_args()
    modes = ["bare", "tpuscope"] + (["deep"] if args.deep else [])
    medians: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for rep in range(args.reps):
            for mode in modes:
                medians[mode].append(run_once(mode, args.steps, work))
            print(f"rep {rep + 1}/{args.reps}: " + "  ".join(
                f"{m} {medians[m][-1] * 1e3:.3f} ms" for m in modes), flush=True)
    bare = statistics.median(medians["bare"])
    print(f"\nmedian step time, bare:      {bare * 1e3:.3f} ms")
    for mode in modes[1:]:
        value = statistics.median(medians[mode])
        ratios = [t / b for t, b in zip(medians[mode], medians["bare"], strict=True)]
        print(f"median step time, {mode + ':':<10} {value * 1e3:.3f} ms   ratio {value / bare:.4f} "
              f"(per-rep ratios {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
