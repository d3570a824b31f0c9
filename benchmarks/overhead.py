"""Step time with and without tpuscope, alternating runs in one go; prints the median ratio.

    python benchmarks/overhead.py [--program transformer|mlp|jax] [--reps 8] [--steps 100]
                                  [--deep] [--debug-text]

Programs: `transformer` (benchmarks/timed_steps.py, the README example's model, ~25-80 ms
steps), `mlp` (timed_mlp.py: torch_xla MLP 256-256-256, batch 32, ~1.5-2 ms steps) and
`jax` (timed_jax.py: a jitted MLP step blocking on its result, ~0.3 ms on the CPU) and
`jax-async` (the same step never blocking, timed in windows of 20 steps: on a TPU a
dispatch-bound step; give it --steps 3000 or more), `jax-state` and `jax-state-async` (the
same with a step that returns only a flax TrainState, as flax's mnist example's `update_model`
does). Each repetition
runs the program bare and under `tpuscope run` (with --deep also under `tpuscope run
--deep`; with --debug-text also bare with the PT_XLA_DEBUG settings `tpuscope run` makes,
to measure torch_xla's own cost of writing its analysis), in ABBA order (the order flips every
repetition, so a drift of the machine's speed cancels out). The program times its own
steps; the first 10 steps of each run (compiles) are dropped. Printed:

- the median over repetitions of (run median / bare median of the same repetition), the
  ratio of the medians (the figure of the target: default mode <= 1.02), and the ratio of
  the runs' 10th-percentile steps (steps that interference spared: on a shared machine the
  medians move by more than the cost measured);
- what tpuscope measured of itself in those runs (time in its step hook plus its flush
  thread's CPU time, per step; `tpuscope show` prints the same line): an upper bound, as
  the first work after a step runs on cold caches whoever does it;
- a paired estimate (--paired-steps, default 1000): ONE `tpuscope run` of the program
  whose step hook is switched off and on every two steps (timed_steps.py --alternate),
  so both kinds of step share the machine's state; the median over adjacent pairs of
  (steps with the hook - steps without), with a distribution-free 95% interval. Its flush
  thread runs in both halves, so its CPU time per step (self-measured, in a second run of as
  many steps with every step hooked) is added to give the total.
On the 2-vCPU VM this was written on, the machine's speed drifts by up to +-20% within
seconds (bare runs: 58-89 ms median steps, also pinned to one CPU), so the run-level
ratio moves by several % between sessions; the paired estimate's interval says how
well it pinned the cost (about +-0.5 ms with 4000 steps here).
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
PROGRAMS = {  # name -> (script, its options)
    "transformer": (HERE / "timed_steps.py", []),
    "mlp": (HERE / "timed_mlp.py", []),
    "jax": (HERE / "timed_jax.py", []),
    "jax-async": (HERE / "timed_jax.py", ["--async"]),
    "jax-state": (HERE / "timed_jax.py", ["--state"]),
    "jax-state-async": (HERE / "timed_jax.py", ["--state", "--async"]),
}
PROGRAM, OPTIONS = PROGRAMS["transformer"]
SKIP = 10
LOW: dict[str, list[float]] = {}  # per mode: each run's 10th-percentile step time
# what `tpuscope run` sets for torch_xla's analysis text (runner.build_env), bare otherwise
DEBUG_TEXT_ENV = {"PT_XLA_DEBUG_LEVEL": "1", "PT_XLA_DEBUG_MAX_FRAME": "64"}


def run_once(mode: str, steps: int, work: Path) -> tuple[float, float | None]:
    """(median step time in s, tpuscope's own cost per step in ms or None) of one run."""
    out = work / f"{mode}-{len(list(work.iterdir()))}.json"
    program = [sys.executable, str(PROGRAM), str(out), "--steps", str(steps), *OPTIONS]
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    store = work / "store"
    if mode in ("bare", "debug-text"):
        cmd = program
        if mode == "debug-text":
            env.update(DEBUG_TEXT_ENV, PT_XLA_DEBUG_FILE=str(work / "pt_xla_debug.txt"))
    else:
        extra = ["--deep"] if mode == "deep" else []
        cmd = [
            sys.executable,
            "-m",
            "tpuscope",
            "run",
            "--quiet",
            "--store",
            str(store),
            *extra,
            *program,
        ]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = sorted(json.loads(out.read_text())[SKIP:])
    LOW[mode].append(times[len(times) // 10])  # the 10th percentile: what interference spares
    return statistics.median(times), (None if mode in ("bare", "debug-text") else own_cost(store))


def own_cost(store: Path) -> float | None:
    """The newest run's self-measured cost per step (ms)."""
    import tpuscope
    from tpuscope.analyze.summary import profiler_ms_per_step

    return profiler_ms_per_step(tpuscope.load_run("latest", store=store).meta)


def flush_ms_per_step(store: Path, before_loop: dict | None = None) -> float:
    """The flush thread's CPU per hooked step; with `before_loop` (a timed program's --alternate: the
    cost figures when its timed loop began), only the flushes from then on (those that wrote
    the loop's rows, the last one at exit included) over the steps hooked since."""
    import tpuscope

    (cost,) = [
        p["profiler_cost"] for p in tpuscope.load_run("latest", store=store).meta["processes"]
    ]
    cpu, steps = cost["flush_cpu_ns"], cost["hook_calls"] + cost["compile_hook_calls"]
    if before_loop:
        cpu, steps = cpu - before_loop["flush_cpu_ns"], steps - before_loop["steps"]
    return cpu / steps / 1e6


def paired(steps: int, work: Path, deep: bool = False) -> None:
    """One run, the hook switched off and on every two steps; prints the paired figures.
    With deep, the run is `tpuscope run --deep`: the hook's cost there (torch_xla's own
    --deep costs, per-execution analysis and IR metadata, are in both halves).

    The flush thread's CPU per step is taken from a second run of as many steps, every one
    hooked: a flush has a fixed cost per part file (every 2 s), which the alternating run
    spreads over half as many hooked steps (measured: 6.5 us per hooked step there, 4.4 in
    the full run, torch_xla MLP)."""
    out, store = work / "paired.json", work / "paired-store"
    times = json.loads(_profiled(work, store, out, steps, deep, "--alternate").read_text())
    full_store = work / "paired-full-store"
    _profiled(work, full_store, work / "paired-full.json", steps, deep)
    on, off = times["on"], times["off"]
    # the k-th pair of steps with the hook ran right after the k-th pair without it: their
    # difference cancels the machine's drift, and the median of the differences its spikes
    diffs = [
        (on[k] + on[k + 1] - off[k] - off[k + 1]) / 2
        for k in range(0, min(len(on), len(off)) - 1, 2)
    ]
    hook = statistics.median(diffs) * 1e3
    low, high = (d * 1e3 for d in median_interval(diffs))
    bare = statistics.median(off) * 1e3
    flush = flush_ms_per_step(full_store)
    print(
        f"flush thread: {flush:.4f} ms per step in a run of {steps} steps, every one hooked; in the "
        f"alternating run {flush_ms_per_step(store, times.get('before_loop')):.4f} per hooked step"
    )
    print(
        f"paired{' (--deep)' if deep else ''} ({len(diffs)} adjacent pairs of 2 steps with / 2 without the hook, one process): "
        f"hook {hook:.3f} ms per step (95% interval of the median {low:.3f} .. {high:.3f} ms) + flush "
        f"thread {flush:.3f} ms = {hook + flush:.3f} ms on a {bare:.3f} ms step: ratio "
        f"{(bare + hook + flush) / bare:.4f} (interval {(bare + low + flush) / bare:.4f} .. "
        f"{(bare + high + flush) / bare:.4f})"
    )


def _profiled(work: Path, store: Path, out: Path, steps: int, deep: bool, *options: str) -> Path:
    """`tpuscope run` of the program (quiet, into `store`); returns its output file."""
    cmd = [
        sys.executable,
        "-m",
        "tpuscope",
        "run",
        "--quiet",
        "--store",
        str(store),
        *(["--deep"] if deep else []),
        sys.executable,
        str(PROGRAM),
        str(out),
        "--steps",
        str(steps),
        *OPTIONS,
        *options,
    ]
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU")}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median: the order statistics
    n/2 -+ 1.96 sqrt(n)/2 (the binomial's normal approximation), whatever the spread."""
    ordered, n = sorted(values), len(values)
    k = max(0, int((n - 1.96 * n**0.5) / 2))
    return ordered[k], ordered[min(n - 1, n - 1 - k)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="transformer")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--deep", action="store_true", help="also measure tpuscope run --deep")
    parser.add_argument(
        "--debug-text",
        action="store_true",
        help="also measure the bare program with PT_XLA_DEBUG_LEVEL=1 (torch_xla programs)",
    )
    parser.add_argument(
        "--paired-steps", type=int, default=1000, help="0: skip the paired estimate"
    )
    parser.add_argument(
        "--paired-deep", action="store_true", help="the paired run under tpuscope run --deep"
    )
    args = parser.parse_args()
    global PROGRAM, OPTIONS
    PROGRAM, OPTIONS = PROGRAMS[args.program]
    modes = (
        ["bare", "tpuscope"]
        + (["deep"] if args.deep else [])
        + (["debug-text"] if args.debug_text else [])
    )
    medians: dict[str, list[float]] = {m: [] for m in modes}
    LOW.update({m: [] for m in modes})
    costs: dict[str, list[float]] = {m: [] for m in modes[1:]}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for rep in range(args.reps):
            for mode in modes if rep % 2 == 0 else modes[::-1]:
                step, cost = run_once(mode, args.steps, work)
                medians[mode].append(step)
                if cost is not None:
                    costs[mode].append(cost)
            print(
                f"rep {rep + 1}/{args.reps}: "
                + "  ".join(f"{m} {medians[m][-1] * 1e3:.3f} ms" for m in modes),
                flush=True,
            )
        if args.reps:
            report(modes, medians, costs)
        if args.paired_steps:
            paired(args.paired_steps, work, deep=args.paired_deep)


def report(
    modes: list[str], medians: dict[str, list[float]], costs: dict[str, list[float]]
) -> None:
    bare = statistics.median(medians["bare"])
    print(f"\n{PROGRAM.name}: median step time, bare:      {bare * 1e3:.3f} ms")
    for mode in modes[1:]:
        ratios = [t / b for t, b in zip(medians[mode], medians["bare"], strict=True)]
        print(
            f"{mode}: median ratio {statistics.median(ratios):.4f} "
            f"(per-rep {', '.join(f'{r:.3f}' for r in ratios)}); "
            f"ratio of medians {statistics.median(medians[mode]) / bare:.4f}; "
            f"ratio of the runs' median 10th-percentile steps "
            f"{statistics.median(LOW[mode]) / statistics.median(LOW['bare']):.4f}"
        )
        if costs[mode]:
            cost = statistics.median(costs[mode])
            print(
                f"{mode}: tpuscope's own measured cost {cost:.3f} ms per step "
                f"= {100 * cost / (bare * 1e3):.2f}% of the bare step"
            )


if __name__ == "__main__":
    main()
