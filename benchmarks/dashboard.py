"""Server-side render time of every dashboard page on a big synthetic run.

Builds a store with one run of 100k steps and 1M trace events (real Parquet with the
store's schemas), then times each page the way a request does: the router builds
the layout (reading the tables) and Dash serializes it to JSON. "cold" is the
first request with nothing cached (each page gets a fresh reader: Parquet read +
figures), "warm" the median of later ones (tables and whole-run figures cached). The zoom callbacks (step timeline, trace timeline) are timed too.
Target: under 1 s per page.

    python benchmarks/dashboard.py                 # 100k steps, 1M events
    python benchmarks/dashboard.py --steps 20000 --events 200000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plotly.io.json import to_json_plotly

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests/synthetic.py

from tests.synthetic import make_run  # noqa: E402
from tpuscope.dashboards import trace_view  # noqa: E402
from tpuscope.dashboards.app import create_app, route  # noqa: E402
from tpuscope.dashboards.data import StoreData  # noqa: E402
from tpuscope.dashboards.pages import overview  # noqa: E402

TARGET_S = 1.0


def timed(
    make: Callable[[StoreData], Callable[[], Any]], store: Path, repeat: int
) -> dict[str, float]:
    """Seconds of render + JSON serialization: cold (a fresh reader, nothing cached, not even
    the tables other pages read) and warm (median of `repeat` more renders); payload size."""
    render = make(StoreData(store))
    times, cpu, size = [], [], 0
    for _ in range(1 + repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        payload = to_json_plotly(render())
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        size = len(payload)
    return {
        "cold_s": times[0],
        "cold_cpu_s": cpu[0],
        "warm_s": statistics.median(times[1:]),
        "payload_kb": size / 1024,
    }


def pages(
    run_id: str, other: str, steps: int, span_ms: float
) -> dict[str, Callable[[StoreData], Callable[[], Any]]]:
    """Page name -> (reader -> render function)."""
    base = f"/run/{run_id}"
    third = (steps // 3, steps // 3 + 500)
    window = (span_ms / 2, span_ms / 2 + span_ms / 100)
    return {
        "Runs": lambda d: lambda: route(d, "/"),
        "Run overview": lambda d: lambda: route(d, base),
        "Recompiles": lambda d: lambda: route(d, base + "/recompiles"),
        "Fallbacks & host syncs": lambda d: lambda: route(d, base + "/fallbacks"),
        "Shape churn": lambda d: lambda: route(d, base + "/churn"),
        "TensorCore": lambda d: lambda: route(d, base + "/tensorcore"),
        "Trace": lambda d: lambda: route(d, base + "/trace"),
        "Compare": lambda d: lambda: route(d, f"/compare/{other}/{run_id}"),
        "zoom: step timeline (500 steps)": lambda d: (
            lambda: overview.timeline_figure(d, run_id, third)
        ),
        "zoom: trace timeline (1% window)": lambda d: (
            lambda: trace_view.timeline(d, run_id, window)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="warm renders per page")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        start = time.perf_counter()
        big = make_run(store, "big", steps=args.steps, trace_events=args.events, recompiles=500)
        small = make_run(store, "small", steps=200, trace_events=1000, recompiles=5, seed=1)
        build_s = time.perf_counter() - start
        create_app(store)  # as served: create_app also warms Plotly up
        events = StoreData(store).table(big.name, "trace_events")
        span_ms = (
            float((events["start_ns"] + events["dur_ns"]).max() - events["start_ns"].min()) / 1e6
        )
        results = {
            name: timed(make, store, args.repeat)
            for name, make in pages(big.name, small.name, args.steps, span_ms).items()
        }
    if args.json:
        print(
            json.dumps(
                {"steps": args.steps, "events": args.events, "build_s": build_s, "pages": results},
                indent=2,
            )
        )
    else:
        print(
            f"synthetic store: {args.steps:,} steps, {args.events:,} trace events (built in {build_s:.1f} s)"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"load average {load:.1f} on {os.cpu_count()} cores: on a busy machine wall time "
            "exceeds CPU time (the process waits for a core)"
        )
        print(
            f"{'page':34s} {'cold (s)':>9s} {'cold CPU (s)':>13s} {'warm (s)':>9s} {'payload (KB)':>13s}"
        )
        for name, r in results.items():
            flag = "" if r["cold_s"] < TARGET_S else "  over target"
            print(
                f"{name:34s} {r['cold_s']:9.3f} {r['cold_cpu_s']:13.3f} {r['warm_s']:9.3f} "
                f"{r['payload_kb']:13.0f}{flag}"
            )
    return 0 if all(r["cold_s"] < TARGET_S for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
