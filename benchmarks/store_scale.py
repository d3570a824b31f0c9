"""`ls`, `show`, `query` and the Hosts page on a big pod run, local and through a GCS API
server, and what one host of a pod writes per minute.

    python benchmarks/store_scale.py [--hosts 64] [--steps 100000] [--repeats 3] [--no-gcs] [--ship-seconds 60]

A synthetic pod run of HOSTS x STEPS steps, laid out as a finished `tpuscope run --run-id`
leaves it (meta.json of what the hosts share, hosts/<host>.json, one process file and one
merged part per host per table), is written with pyarrow straight into the store layout
in a temporary folder, then copied into a `gcp-storage-emulator` server on loopback. Each
command is run as a user runs it (a fresh `python -m tpuscope` process, so the figures
include Python's start and tpuscope's imports), REPEATS times; the median is printed.
Locally the first `show` analyses the run and writes analysis.json (what the last host of
a pod does when it ends), the next ones read what it wrote; the copy in the emulator holds
that analysis. The Hosts page is timed in this process, as a running dashboard serves it
on a cold cache.

--ship-seconds S also measures what one host of a pod writes: a real PartWriter flushing a
10-steps/s stream every 2 s into its stage (what a local store receives) and the real
Shipper of `tpuscope run --run-id` sending it every SHIP_INTERVAL_S, for S seconds;
printed as files/objects and bytes per host per minute.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.object_stores import gcs_emulator  # noqa: E402
from tpuscope.schema import TABLES  # noqa: E402
from tpuscope.store import layout  # noqa: E402
from tpuscope.store.files import write_json_atomic  # noqa: E402
from tpuscope.store.hosts import HOSTS_DIR, host_meta_path  # noqa: E402
from tpuscope.store.pods import pod_meta  # noqa: E402

QUERY = "SELECT host, median(wall_ns)/1e6 AS p50_ms FROM steps GROUP BY host ORDER BY 2 DESC"


def steps_table(host: str, rank: int, steps: int, rng: np.random.Generator) -> pa.Table:
    wall = rng.normal(50e6 * (1.2 if rank == 7 else 1.0), 2e6, steps).astype(np.int64)
    end = 1_764_000_000_000_000_000 + np.cumsum(wall)
    zeros = np.zeros(steps, np.int64)
    columns = {
        "host": pa.array([host] * steps).dictionary_encode(),
        "pid": pa.array(np.full(steps, 1000 + rank, np.int32)),
        "rank": pa.array(np.full(steps, rank, np.int32)),
        "step": np.arange(steps, dtype=np.int64),
        "start_ns": end - wall,
        "end_ns": end,
        "wall_ns": wall,
        "boundary": pa.array(["sync"] * steps).dictionary_encode(),
        "compiles": np.where(np.arange(steps) < 2, 1, 0),
        "compile_ns": zeros,
        "executions": np.ones(steps, np.int64),
        "execute_ns": wall // 2,
        "fallback_ops": zeros,
        "transfers_from_device": zeros,
        "graph_hashes": pa.nulls(steps, pa.list_(pa.string())),
    }
    return pa.table({f.name: pa.array(columns[f.name]).cast(f.type) for f in TABLES["steps"]})


def make_run(root: Path, hosts: int, steps: int) -> str:
    """The run folder, as a finished pod run leaves it: meta.json of what the hosts share,
    hosts/<host>.json, one merged part per host per table."""
    run_id = f"pod-{hosts}x{steps}"
    run = root / run_id
    rng = np.random.default_rng(0)
    for name in ("steps", "compiles", "procs", HOSTS_DIR):
        (run / name).mkdir(parents=True, exist_ok=True)
    for rank in range(hosts):
        host = f"host-{rank:02d}"
        tag = f"{host}-{1000 + rank}"
        pq.write_table(
            steps_table(host, rank, steps, rng), run / "steps" / layout.compact_name(tag, 1)
        )
        compiles = pa.Table.from_pylist(
            [
                {
                    "host": host,
                    "pid": 1000 + rank,
                    "rank": rank,
                    "step": s,
                    "index": s,
                    "time_ns": 0,
                    "duration_ns": 200_000_000,
                    "graph_hash": f"g{s}",
                    "location": "train.py:12",
                    "cause": "user torch_xla.sync",
                }
                for s in (0, 1)
            ],
            schema=TABLES["compiles"],
        )
        pq.write_table(compiles, run / "compiles" / layout.compact_name(tag, 1))
        (run / layout.proc_file(host, 1000 + rank)).write_text(
            json.dumps(
                {
                    "host": host,
                    "pid": 1000 + rank,
                    "rank": rank,
                    "backend": "torch_xla",
                    "status": "finished",
                }
            )
        )
        write_json_atomic(
            host_meta_path(run, host),
            {
                "host": host,
                "status": "finished",
                "exit_code": 0,
                "warmup": 2,
                "start_ns": 1_764_000_000_000_000_000,
                "end_ns": 1_764_000_000_000_000_000 + steps * 50_000_000,
                "command": "python train.py",
            },
        )
    (run / layout.META).write_text(json.dumps(pod_meta(run_id, name="pod")))
    return run_id


def timed(args: list[str], env: dict[str, str], repeats: int) -> tuple[float, float]:
    """Median wall seconds and CPU seconds (user + system, the command and the threads it
    started; steadier than wall time on a shared machine) of `python -m tpuscope ARGS`."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "tpuscope", *args], env=env, capture_output=True, text=True
        )
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"tpuscope {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return statistics.median(walls), statistics.median(cpus)


def measure(
    store: str, run_id: str, env: dict[str, str], repeats: int, analyse: bool = True
) -> dict[str, tuple[float, float]]:
    """Each command's median (wall, CPU) seconds; the first `show` analyses the run (as the
    last host of a pod does when it ends) unless the store holds the analysis already."""
    out: dict[str, tuple[float, float]] = {
        "ls": timed(["ls", "--store", store, "--json"], env, repeats)
    }
    if analyse:
        out["show (analyses, writes analysis.json)"] = timed(
            ["show", "--store", store, run_id, "--json"], env, 1
        )
    out["show (stored analysis)"] = timed(
        ["show", "--store", store, run_id, "--json"], env, repeats
    )
    out["query p50 per host"] = timed(
        ["query", "--store", store, run_id, QUERY, "--json"], env, repeats
    )
    out["Hosts page (a running dashboard, cold)"] = hosts_page(store, run_id, env, repeats)
    return out


def hosts_page(store: str, run_id: str, env: dict[str, str], repeats: int) -> tuple[float, float]:
    """The Hosts page as a running dashboard serves it on a cold cache (a new StoreData:
    the run's meta, its stored summary, the layout built and serialized), in this process."""
    os.environ.update(env)
    from plotly.io.json import to_json_plotly

    from tpuscope.dashboards.app import route
    from tpuscope.dashboards.data import StoreData

    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        page = to_json_plotly(route(StoreData(store), f"/run/{run_id}/hosts"))
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        if "page-hosts" not in page:
            raise SystemExit(f"no Hosts page for {run_id}: {page[:300]}")
    return statistics.median(walls), statistics.median(cpus)


def ship_minute(seconds: float, env: dict[str, str], stage: Path) -> dict[str, float]:
    """Objects and bytes one host of a pod writes per minute: a real writer flushing into its
    stage (what a local store receives) and the real Shipper of `tpuscope run --run-id`
    sending it to the GCS emulator (store.pods.join_remote)."""
    os.environ.update(env, TPUSCOPE_STAGE=str(stage))
    import fsspec

    from tpuscope.collect.session import FLUSH_INTERVAL_S
    from tpuscope.store import PartWriter
    from tpuscope.store.location import Location
    from tpuscope.store.pods import join_remote
    from tpuscope.store.ship import _SHIPPERS

    fsspec.filesystem("gs").mkdir("ship")
    run_dir = join_remote(Location.of("gs://ship/runs"), "ship-run", "host-00", name="bench")
    shipper = _SHIPPERS[run_dir]
    writer = PartWriter(run_dir, tag="host-00-1")
    start, step = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for _ in range(int(10 * FLUSH_INTERVAL_S)):
            writer.append(
                "steps",
                {"host": "host-00", "pid": 1, "rank": 0, "step": step, "wall_ns": 100_000_000},
            )
            writer.append(
                "metrics",
                {
                    "host": "host-00",
                    "pid": 1,
                    "rank": 0,
                    "step": step,
                    "name": "ExecuteTime",
                    "kind": "metric",
                    "count": 1,
                    "total": 1000,
                },
            )
            step += 1
        writer.flush()
        time.sleep(FLUSH_INTERVAL_S)
    shipper._stop.set()
    minutes = (time.monotonic() - start) / 60
    local = [p for p in run_dir.rglob("part-*.parquet")]
    return {
        "objects_per_min": shipper.objects / minutes,
        "bytes_per_min": shipper.bytes / minutes,
        "interval_s": shipper.interval,
        "local_files_per_min": len(local) / minutes,
        "local_bytes_per_min": sum(p.stat().st_size for p in local) / minutes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-gcs", action="store_true")
    parser.add_argument("--ship-seconds", type=float, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tpuscope-scale-") as tmp:
        root = Path(tmp) / "store"
        began = time.perf_counter()
        run_id = make_run(root, args.hosts, args.steps)
        size = sum(p.stat().st_size for p in (root / run_id).rglob("*") if p.is_file())
        files = sum(1 for p in (root / run_id).rglob("*") if p.is_file())
        print(
            f"run {run_id}: {args.hosts * args.steps:,} step rows, {files} files, {size / 1e6:.1f} MB "
            f"(written in {time.perf_counter() - began:.1f} s)"
        )
        env = {k: v for k, v in os.environ.items() if k != "TPUSCOPE_STORE"}
        results = {"local": measure(str(root), run_id, env, args.repeats)}
        with contextlib.ExitStack() as stack:
            if not args.no_gcs or args.ship_seconds:
                gcs_env = stack.enter_context(gcs_emulator("scale")).env
                env = {**env, **gcs_env}
            if not args.no_gcs:
                os.environ.update(gcs_env)
                import fsspec

                fs = fsspec.filesystem("gs")
                local = root / run_id
                remote = f"scale/store/{run_id}"
                for path in sorted(local.rglob("*")):  # analysis.json last: newer than every part
                    if path.is_file() and path.name != layout.ANALYSIS:
                        fs.pipe_file(
                            f"{remote}/{path.relative_to(local).as_posix()}", path.read_bytes()
                        )
                fs.pipe_file(f"{remote}/{layout.ANALYSIS}", (local / layout.ANALYSIS).read_bytes())
                results["gcs emulator"] = measure(
                    "gs://scale/store", run_id, env, args.repeats, analyse=False
                )
            for where, figures in results.items():
                for what, (wall, cpu) in figures.items():
                    print(f"{where:13s} {what:40s} {wall:7.2f} s wall {cpu:7.2f} s CPU")
            if args.ship_seconds:
                shipped = ship_minute(args.ship_seconds, gcs_env, Path(tmp) / "stage")
                print(
                    f"one host, 10 steps/s: a local store gets {shipped['local_files_per_min']:.0f} part "
                    f"files and {shipped['local_bytes_per_min'] / 1e3:.0f} kB per minute; shipped every "
                    f"{shipped['interval_s']:.0f} s: {shipped['objects_per_min']:.0f} objects and "
                    f"{shipped['bytes_per_min'] / 1e3:.0f} kB per minute"
                )


if __name__ == "__main__":
    main()
