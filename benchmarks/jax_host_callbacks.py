"""What host callbacks inside a jitted step cost, bare, against what tpuscope's `host_callback`
cards say (JAX on this machine's backend):

    python benchmarks/jax_host_callbacks.py [--steps 60] [--host-ms 3] [--pairs 2]

tests/programs/host_callbacks.py runs bare with no callback, with a `jax.debug.print`, with a
`jax.pure_callback` (a numpy function busy for --host-ms of CPU) and with both, --pairs times each in
alternation (its own `step_ms`: the truth is each variant's step less the plain one's), then
under `tpuscope run` with both: each card's cost per judged step against that truth.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "host_callbacks.py"


def bare(steps: int, which: str, host_ms: float) -> float:
    out = subprocess.run(
        [sys.executable, str(PROGRAM), str(steps), which, str(host_ms)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip().splitlines()[-1].split()[1])


def cards(steps: int, host_ms: float) -> dict[str, float]:
    """Each host_callback card's cost per judged step (ms), by its API, under tpuscope run."""
    with tempfile.TemporaryDirectory() as store:
        run = [sys.executable, "-m", "tpuscope", "run", "--quiet", "--store", store]
        subprocess.run(
            [*run, sys.executable, str(PROGRAM), str(steps), "both", str(host_ms)],
            capture_output=True,
            check=True,
            cwd=ROOT,
        )
        shown = subprocess.run(
            [sys.executable, "-m", "tpuscope", "show", "latest", "--store", store, "--json"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    report = json.loads(shown)
    judged = report["summary"]["steps_judged"]
    return {
        f["evidence"]["api"]: 1e3 * f["cost_s"] / judged
        for f in report["findings"]
        if f["rule"] == "host_callback"
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--host-ms", type=float, default=3.0)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {w: [] for w in ("none", "print", "pure", "both")}
    for _ in range(args.pairs):
        for which in times:
            times[which].append(bare(args.steps, which, args.host_ms))
    step = {w: statistics.median(t) for w, t in times.items()}
    for which, ms in step.items():
        print(f"bare {which:5s} step_ms {ms:.3f}  runs {times[which]}")
    found = cards(args.steps, args.host_ms)
    truth = {
        "jax.debug.print": step["print"] - step["none"],
        "jax.pure_callback": step["pure"] - step["none"],
    }
    for api, lost in truth.items():
        card = found.get(api)
        ratio = f"{card / lost:.2f}" if card is not None and lost > 0 else "-"
        print(f"{api:18s} truth {lost:.3f} ms a step  card {card or 0:.3f} ms  card/truth {ratio}")
    both = step["both"] - step["none"]
    print(f"both callbacks: truth {both:.3f} ms a step, cards {sum(found.values()):.3f} ms")


if __name__ == "__main__":
    main()
