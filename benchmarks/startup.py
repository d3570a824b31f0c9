"""What `tpuscope run` adds to a program that does nothing: `python -c pass` bare and profiled.

    python benchmarks/startup.py [--reps 20]

Each repetition runs `python -c pass` bare and as `tpuscope run --quiet python -c pass`
(the launcher's start, the child's sitecustomize and collector start-up, the launcher's
end of run), in ABBA order, and times each whole command from outside. Printed: the
median wall time of each, the difference of the medians (the target: under 0.3 s), and
the median of the per-repetition differences with a distribution-free 95% interval
(overhead.median_interval), which a drift of the machine's speed moves less. Also timed:
the CLI's own start (`tpuscope --help`), and the profiled child alone (`python -c pass`
with tpuscope's sitecustomize and run folder, as `tpuscope run` starts it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import median_interval  # noqa: E402

import tpuscope  # noqa: E402

BOOT = Path(tpuscope.__file__).resolve().parent / "_boot"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def commands(work: Path) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """name -> (command, environment) of everything timed."""
    child_env = {
        **os.environ,
        "PYTHONPATH": str(BOOT),
        "TPUSCOPE_RUN_DIR": str(work / "child-run"),
        "TPUSCOPE_SRC": str(BOOT.parent.parent),
    }
    return {
        "bare": ([sys.executable, "-c", "pass"], None),
        "tpuscope run": (
            [
                sys.executable,
                "-m",
                "tpuscope",
                "run",
                "--quiet",
                "--store",
                str(work / "store"),
                sys.executable,
                "-c",
                "pass",
            ],
            None,
        ),
        "tpuscope --help": ([sys.executable, "-m", "tpuscope", "--help"], None),
        "profiled child": ([sys.executable, "-c", "pass"], child_env),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for rep in range(args.reps):
            for name in cmds if rep % 2 == 0 else list(cmds)[::-1]:
                times[name].append(timed(*cmds[name]))
    bare = statistics.median(times["bare"])
    for name, values in times.items():
        print(
            f"{name:16s} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})"
        )
    diffs = [run - b for run, b in zip(times["tpuscope run"], times["bare"], strict=True)]
    low, high = median_interval(diffs)
    print(
        f"\ntpuscope run adds {statistics.median(times['tpuscope run']) - bare:.3f} s (difference of medians); "
        f"paired: median {statistics.median(diffs):.3f} s, 95% interval {low:.3f} .. {high:.3f} s "
        f"over {args.reps} ABBA repetitions"
    )


if __name__ == "__main__":
    main()
