"""Run `tpuscope bench` over every bundled model and write the tables of docs/benchmarks.md.

    python benchmarks/eager_modes.py --out /tmp/eager_modes.md            # the documented run
    python benchmarks/eager_modes.py --size tiny --repeats 1 --steps 5     # a quick look

Each model is one `tpuscope bench` (a fresh process per mode and repeat, saved in
the store); this script only loops over the models and writes their Markdown
tables, with the machine and load they were measured under.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from tpuscope.bench.harness import BenchPlan, run_bench
from tpuscope.collect.session import package_versions
from tpuscope.report import bench as report

ALL_MODES = ["strict", "fused", "debug", "compiled", "dynamo"]
PLAN = [  # (model, size, backends, modes, repeats); --size/--repeats override size and repeats
    ("transformer", "small", ["torch_xla"], ALL_MODES, 3),
    ("transformer", "tiny", ["torch_xla"], ALL_MODES, 3),
    ("varlen", "small", ["torch_xla"], ["strict", "fused", "compiled"], 2),
    ("mlp", "small", ["torch_xla", "jax"], ["strict", "fused", "debug"], 2),
    ("transformer-hd128", "small", ["torch_xla"], ["strict", "fused"], 2),
]


def machine() -> str:
    versions = package_versions()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load}; "
        f"python {versions.get('python')}, torch {versions.get('torch')}, "
        f"torch_xla {versions.get('torch_xla')}, jax {versions.get('jax')}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '(unset)')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", default=None, help="one size for every model (default: the plan's)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=None, help="default: the plan's")
    parser.add_argument("--store", default="./tpuscope-runs")
    parser.add_argument("--models", default=",".join(dict.fromkeys(p[0] for p in PLAN)))
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here too")
    args = parser.parse_args()
    wanted = args.models.split(",")
    sections = [f"Measured on: {machine()}\n"]
    done = set()
    for model, size, backends, modes, repeats in PLAN:
        size, repeats = args.size or size, args.repeats or repeats
        if model not in wanted or (model, size) in done:  # --size collapses the plan's sizes
            continue
        done.add((model, size))
        command = (
            f"tpuscope bench --model {model} --backends {','.join(backends)} --modes {','.join(modes)} "
            f"--size {size} --steps {args.steps} --warmup {args.warmup} --repeats {repeats}"
        )
        plan = BenchPlan(
            model=model,
            modes=modes,
            backends=backends,
            size=size,
            steps=args.steps,
            warmup=args.warmup,
            repeats=repeats,
            store=args.store,
            command=command,
        )
        started = time.strftime("%H:%M:%S")
        result = run_bench(plan)
        sections.append(
            f"### {model} ({size})\n\n`{command}` (started {started}, {result.seconds:.0f} s, "
            f"group `{result.group}`)\n\n{report.to_markdown(result)}\n"
        )
        print(sections[-1], flush=True)
    sections.append(f"Load average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.out:
        args.out.write_text("\n".join(sections))


if __name__ == "__main__":
    main()
