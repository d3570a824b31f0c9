"""Time of the pod analysis and the Hosts page on a big synthetic pod run.

Builds one run joined by many hosts the way `tpuscope run --run-id` lays it out (meta.json,
hosts/<host>.json, procs/<host>-<pid>.json, one steps and one compiles part per host, real
Parquet with the store's schemas), one host slower than the others and one compiling a graph of
its own, then times: reading the run's meta (what `tpuscope ls` does per run), the one analysis
(tables read, every rule per host, the pod rules: `tpuscope show --reanalyze`), and the Hosts
page (layout built and serialized as a request does). The analysis is the one `tpuscope run`'s
last host and `show --reanalyze` run: DuckDB over the parts (detect/pod_tables.py, the per-host
rules only where detect/pod_gate.py finds their inputs); `--in-memory` times the path that
holds every host's tables at once (RunTables.from_run: the same SQL over the frames, every rule
on every host), for the ratio.

The analysis runs in a process of its own, started once the pod is built, so its figures are
its own (issue 30 measures the analysis, not the building of a synthetic pod): `analyze_s` and
`analyze_cpu_s` time the one analysis after the imports, `analysis_process_*` the whole child
(interpreter, imports, analysis) with its CPU seconds (all threads: DuckDB uses every core) and
peak RSS from the kernel (os.wait4). The machine's load average is recorded beside them.
`--root DIR` builds the pod there once and reuses it (the build of 512 x 100k takes minutes).

    python benchmarks/pod_scale.py                       # 64 hosts x 10k steps
    python benchmarks/pod_scale.py --hosts 128 --steps 100000 --json
    python benchmarks/pod_scale.py --hosts 128 --steps 100000 --json --in-memory
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tpuscope.schema import TABLES
from tpuscope.store import Run
from tpuscope.store.files import write_json_atomic
from tpuscope.store.parts import write_table_atomic
from tpuscope.store.pods import join_run, update_host_meta
from tpuscope.store.runstore import read_meta

MS = 1_000_000
SITE = "/work/train.py:57"


def _steps(host: str, pid: int, n: int, rng: np.random.Generator, slow: bool) -> pa.Table:
    wall = rng.lognormal(np.log(40 * MS), 0.05, n).astype(np.int64) + (6 * MS if slow else 0)
    wall[:2] = [9_000 * MS, 3_000 * MS]
    end = 1_700_000_000 * 10**9 + np.cumsum(wall)
    compiles = np.zeros(n, np.int64)
    compiles[:2] = 1
    cols = {
        "host": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([host])),
        "pid": pa.array(np.full(n, pid, np.int32)),
        "rank": pa.array(np.zeros(n, np.int32)),
        "step": pa.array(np.arange(n, dtype=np.int64)),
        "start_ns": pa.array(end - wall),
        "end_ns": pa.array(end),
        "wall_ns": pa.array(wall),
        "boundary": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array(["sync"])
        ),
        "compiles": pa.array(compiles),
        "compile_ns": pa.array(np.where(compiles > 0, wall - 40 * MS, 0)),
        "executions": pa.array(np.ones(n, np.int64)),
        "execute_ns": pa.array((wall * 0.6).astype(np.int64)),
        "fallback_ops": pa.array(np.zeros(n, np.int64)),
        "transfers_from_device": pa.array(np.zeros(n, np.int64)),
        "graph_hashes": pa.array([None] * n, pa.list_(pa.string())),
    }
    return pa.table(cols, schema=TABLES["steps"])


def _compiles(host: str, pid: int, extra: bool) -> pa.Table:
    rows = [
        {
            "host": host,
            "pid": pid,
            "rank": 0,
            "step": s,
            "index": s,
            "time_ns": s,
            "duration_ns": d,
            "graph_hash": f"g{s}",
            "cause": "user torch_xla.sync",
            "location": SITE,
            "num_inputs": n,
        }
        for s, d, n in ((0, 9_000 * MS, 4), (1, 3_000 * MS, 9))
    ]
    if extra:
        rows.append(
            {**rows[0], "step": 50, "index": 2, "time_ns": 50, "location": "/work/train.py:90"}
        )
    return pa.Table.from_pylist(rows, schema=TABLES["compiles"])


def make_pod(root: Path, hosts: int, steps: int) -> Path:
    """The synthetic pod run; host-3 is 6 ms slower per step, host-1 compiles a graph of its own."""
    rng = np.random.default_rng(0)
    run_dir = join_run(root, "pod-bench", name="pod-bench")
    for k in range(hosts):
        host, pid = f"host-{k}", 1000 + k
        update_host_meta(
            run_dir, host, status="finished", exit_code=0, start_ns=1, end_ns=2, warmup=2
        )
        write_json_atomic(
            run_dir / "procs" / f"{host}-{pid}.json",
            {"host": host, "pid": pid, "rank": k, "status": "finished", "backend": "torch_xla"},
        )
        write_table_atomic(
            run_dir / "steps" / f"part-{host}-{pid}-000001.parquet",
            _steps(host, pid, steps, rng, slow=k == 3),
        )
        write_table_atomic(
            run_dir / "compiles" / f"part-{host}-{pid}-000002.parquet",
            _compiles(host, pid, extra=k == 1),
        )
    return run_dir


def _in_memory(run: Run) -> Any:
    """The analysis with every table of every host in memory (RunTables.from_run), written."""
    from tpuscope.detect import RunTables, detect
    from tpuscope.detect.run_analysis import RunReport, _summary

    tables = RunTables.from_run(run)
    findings = detect(tables)
    report = RunReport(summary=_summary(tables, findings), findings=findings)
    run.write_findings(report.findings)
    run.write_analysis(report.summary)
    return report


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _analyse_here(run_dir: str, in_memory: bool) -> dict[str, Any]:
    """The child: the imports, then the one analysis timed (wall and CPU), its findings named."""
    from tpuscope.detect import registry
    from tpuscope.detect.run_analysis import analyze

    registry.register_defaults()  # the rules imported, as a running pod's last host has them
    wall, cpu = time.perf_counter(), time.process_time()
    report = _in_memory(Run(run_dir)) if in_memory else analyze(Run(run_dir))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "analyze_s": round(wall, 2),
        "analyze_cpu_s": round(cpu, 2),
        "findings": sorted(
            {(f.rule, ", ".join(f.evidence.get("hosts", [])[:3])) for f in report.findings}
        ),
    }


def _analyse(run_dir: Path, in_memory: bool) -> dict[str, Any]:
    """The analysis in a child process: its own timings, and its wall, CPU and peak RSS."""
    argv = [sys.executable, __file__, "--analyse-only", str(run_dir)] + (
        ["--in-memory"] * in_memory
    )
    load = os.getloadavg()[0]
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"the analysis failed (status {status})")
    child.returncode = 0
    return {
        **json.loads(out),
        "analysis_process_s": round(wall, 2),
        "analysis_process_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "analysis_peak_rss_gb": round(usage.ru_maxrss / 1e6, 3),
        "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="every host's tables in memory at once",
    )
    parser.add_argument("--root", help="build the pod here (once; reused when it is there)")
    parser.add_argument("--analyse-only", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.analyse_only:
        print(json.dumps(_analyse_here(args.analyse_only, args.in_memory)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.root or tmp)
        run_dir = root / "pod-bench"
        built = (run_dir / "meta.json").exists()
        _, build_s = _timed(lambda: None if built else make_pod(root, args.hosts, args.steps))
        meta, meta_s = _timed(lambda: read_meta(run_dir))
        analysis = _analyse(run_dir, args.in_memory)
        page, page_s = _timed(lambda: _hosts_page(root))
        figures = {
            "hosts": args.hosts,
            "steps_per_host": args.steps,
            "build_s": "reused" if built else round(build_s, 2),
            "read_meta_s": round(meta_s, 3),
            "analysis": "in memory (pandas)" if args.in_memory else "over the parts (DuckDB)",
            **{k: v for k, v in analysis.items() if k != "findings"},
            "hosts_page_cold_s": round(page_s, 2),
            "hosts_page_kb": round(len(page) / 1024, 1),
            "status": meta["status"],
            "findings": analysis["findings"],
        }
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key:>24}: {value}")
    return 0


def _hosts_page(root: Path) -> str:
    from plotly.io.json import to_json_plotly

    from tpuscope.dashboards.app import route
    from tpuscope.dashboards.data import StoreData

    return str(to_json_plotly(route(StoreData(str(root)), "/run/pod-bench/hosts")))


if __name__ == "__main__":
    sys.exit(main())
