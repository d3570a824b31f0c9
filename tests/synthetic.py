"""Synthetic runs written as real Parquet with the store's schemas (tpuscope.schema.TABLES).

A helper of the tests and the benchmarks (benchmarks/dashboard.py, read_scale.py import it
from the checkout), not part of the package.

For what a CPU run here cannot produce: the 100k-step / 1M-event run of
benchmarks/dashboard.py, and a TPU-like device view (HLO dots, a trace, xprof's
figures) for the TensorCore and Trace pages in the browser tests and screenshots.
Findings come from tpuscope's own detectors run over these tables.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tpuscope.schema import TABLES, Finding
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import Run, RunStore
from tpuscope.store.parts import write_table_atomic

SITE = "examples/train_varlen.py:57"
MS = 1_000_000


def _categorical(codes: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(names))


def _write(run_dir: Path, name: str, table: pa.Table, parts: int = 1) -> None:
    """The table as `parts` part files of consecutive rows (a live run flushes a part every 2 s)."""
    size = max(1, -(-table.num_rows // max(parts, 1)))
    for seq, start in enumerate(range(0, max(table.num_rows, 1), size), start=1):
        write_table_atomic(
            run_dir / name / f"part-synthetic-{seq:06d}.parquet", table.slice(start, size)
        )


def _steps(n: int, rng: np.random.Generator, t0: int, recompile_steps: np.ndarray) -> pa.Table:
    wall = rng.lognormal(np.log(40 * MS), 0.08, n).astype(np.int64)
    wall[:2] = [9_800 * MS, 7_400 * MS]
    wall[recompile_steps] += rng.integers(900, 1500, len(recompile_steps)) * MS
    end = t0 + np.cumsum(wall)
    compiles = np.zeros(n, np.int64)
    compiles[:2] = 1
    compiles[recompile_steps] = 1
    fallbacks = np.where(np.arange(n) >= 2, 3, 0)
    cols = {
        "host": _categorical(np.zeros(n), ["vm"]),
        "pid": pa.array(np.full(n, 4242, np.int32)),
        "rank": pa.array(np.zeros(n, np.int32)),
        "step": pa.array(np.arange(n, dtype=np.int64)),
        "start_ns": pa.array(end - wall),
        "end_ns": pa.array(end),
        "wall_ns": pa.array(wall),
        "boundary": _categorical(np.zeros(n), ["sync"]),
        "compiles": pa.array(compiles),
        "compile_ns": pa.array(np.where(compiles > 0, wall - 40 * MS, 0)),
        "executions": pa.array(np.ones(n, np.int64)),
        "execute_ns": pa.array((wall * 0.6).astype(np.int64)),
        "fallback_ops": pa.array(fallbacks.astype(np.int64)),
        "transfers_from_device": pa.array(np.where(np.arange(n) >= 2, 1, 0).astype(np.int64)),
        "graph_hashes": pa.array([[] for _ in range(n)], pa.list_(pa.string())),
    }
    return pa.table(cols, schema=TABLES["steps"])


def _compiles(steps: pa.Table, recompile_steps: np.ndarray, lengths: list[int]) -> pa.Table:
    wall = steps.column("wall_ns").to_numpy()
    end = steps.column("end_ns").to_numpy()
    rows = []
    for i, step in enumerate([0, 1, *recompile_steps.tolist()]):
        length = 16 if i < 2 else lengths[(i - 2) % len(lengths)]
        rows.append(
            {
                "host": "vm",
                "pid": 4242,
                "rank": 0,
                "step": int(step),
                "index": i,
                "time_ns": int(end[step]),
                "duration_ns": int(wall[step] - 40 * MS),
                "graph_hash": f"{(i * 2654435761) % 2**64:016x}",
                "cause": "user torch_xla.sync",
                "location": SITE,
                "frames": [
                    "sync (torch_xla/torch_xla.py:80)",
                    f"train_step ({SITE})",
                    "main (examples/train_varlen.py:88)",
                ],
                "num_inputs": 25,
                "num_outputs": 78,
                "input_shapes": ["s64[8," + str(length) + "]", "f32[64,32]", f"f32[8,{length},32]"],
                "input_gb": 1e-4,
                "output_gb": 3e-4,
                "aliased_gb": 1e-4,
                "intermediate_gb": 5e-4,
                "program_gb": 0.0,
            }
        )
    return pa.Table.from_pylist(rows, schema=TABLES["compiles"])


def _fallbacks(n: int) -> pa.Table:
    steps = np.arange(2, n, dtype=np.int64)
    k = len(steps)
    ops = np.concatenate([np.zeros(k), np.ones(k)]).astype(np.int32)
    return pa.table(
        {
            "host": _categorical(np.zeros(2 * k), ["vm"]),
            "pid": pa.array(np.full(2 * k, 4242, np.int32)),
            "rank": pa.array(np.zeros(2 * k, np.int32)),
            "step": pa.array(np.concatenate([steps, steps])),
            "op": _categorical(ops, ["aten::nonzero", "aten::_local_scalar_dense"]),
            "count": pa.array(np.concatenate([np.full(k, 2), np.ones(k)]).astype(np.int64)),
            "location": pa.array(
                ["examples/train_varlen.py:61"] * k + ["examples/train_varlen.py:70"] * k
            ),
            "library_frame": pa.nulls(2 * k, pa.string()),
        },
        schema=TABLES["fallbacks"],
    )


def _metrics(steps: pa.Table) -> pa.Table:
    """The per-step metric rows a torch_xla step writes (long format): the step marker, the
    execution, the device-to-host read, compile time on compiling steps and two more counters."""
    step = steps.column("step").to_numpy()
    n = len(step)
    compiled = steps.column("compiles").to_numpy() > 0
    reads = steps.column("transfers_from_device").to_numpy()
    names = [
        "MarkStep",
        "ExecuteTime",
        "TransferFromDeviceTime",
        "CompileTime",
        "CachedCompile",
        "xla::_to_copy",
    ]
    kinds = [0, 1, 1, 1, 0, 0]  # counter, metric
    blocks = [
        (0, np.ones(n), np.zeros(n), np.ones(n, bool)),
        (1, np.ones(n), steps.column("execute_ns").to_numpy().astype(float), np.ones(n, bool)),
        (2, reads, reads * 0.2 * MS, reads > 0),
        (3, np.ones(n), steps.column("compile_ns").to_numpy().astype(float), compiled),
        (4, np.ones(n), np.zeros(n), ~compiled),
        (5, np.full(n, 3), np.zeros(n), np.ones(n, bool)),
    ]
    code = np.concatenate([np.full(int(m.sum()), i) for i, _, _, m in blocks])
    k = len(code)
    return pa.table(
        {
            "host": _categorical(np.zeros(k), ["vm"]),
            "pid": pa.array(np.full(k, 4242, np.int32)),
            "rank": pa.array(np.zeros(k, np.int32)),
            "step": pa.array(np.concatenate([step[m] for *_, m in blocks])),
            "name": _categorical(code, names),
            "kind": _categorical(np.asarray(kinds)[code], ["counter", "metric"]),
            "count": pa.array(np.concatenate([c[m] for _, c, _, m in blocks]).astype(np.int64)),
            "total": pa.array(np.concatenate([t[m] for _, _, t, m in blocks])),
        },
        schema=TABLES["metrics"],
    ).sort_by("step")


def _findings(run_dir: Path) -> list[Finding]:
    """What tpuscope's own detectors say about the synthetic tables."""
    from tpuscope.detect import RunTables, detect

    return detect(RunTables.from_run(Run(run_dir)))


def _rows(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    process = {"host": "vm", "pid": 4242, "rank": 0}
    return pa.Table.from_pylist([{**process, **row} for row in rows], schema=TABLES[name])


def _hlo_ops() -> pa.Table:
    """A transformer block's dots at head_dim 64 (batch = batch x heads for attention)."""
    dots = [
        ("q_proj", 1, 2048, 512, 512),
        ("attn_scores", 16, 128, 128, 64),
        ("attn_values", 16, 128, 64, 128),
        ("mlp_up", 1, 2048, 2048, 512),
        ("mlp_down", 1, 2048, 512, 2048),
        ("lm_head", 1, 2048, 1000, 512),
    ]
    return _rows(
        "hlo_ops",
        [
            {
                "module": "SyncTensorsGraph.1",
                "stage": "before_optimizations",
                "computation": "main",
                "name": name,
                "opcode": "dot",
                "dtype": "f32",
                "lhs_dtype": "f32" if i % 3 else "bf16",
                "rhs_dtype": "f32" if i % 3 else "bf16",
                "batch": b,
                "m": m,
                "n": n,
                "k": k,
                "flops": 2.0 * b * m * n * k,
                "precision": "default",
                "source_file": "model.py",
                "source_line": 80 + i,
                "op_type": "aten__mm",
            }
            for i, (name, b, m, n, k) in enumerate(dots)
        ],
    )


def _device_view(t0: int) -> tuple[pa.Table, pa.Table]:
    """xprof overview figures and per-step device busy/idle, as the device view stores them."""
    overview = _rows(
        "xprof_overview",
        [
            {"source": "overview_page", "name": name, "value": value}
            for name, value in (
                ("mxu_utilization_percent", 31.5),
                ("device_duty_cycle_percent", 82.0),
                ("device_idle_time_percent", 18.0),
            )
        ],
    )
    steps = _rows(
        "device_steps",
        [
            {
                "device": "/device:TPU:0",
                "step": s,
                "start_ns": t0 + s * 40 * MS,
                "end_ns": t0 + (s + 1) * 40 * MS,
                "busy_ns": int((0.78 + 0.02 * (s % 3)) * 40 * MS),
                "idle_ns": int((0.22 - 0.02 * (s % 3)) * 40 * MS),
                "ops": 900,
                "window": "steps",
            }
            for s in range(10, 20)
        ],
    )
    return overview, steps


def _trace_events(count: int, rng: np.random.Generator, t0: int) -> pa.Table:
    """Events on a TPU op line, a module line and two host threads, spread over one window."""
    lanes = [
        ("/device:TPU:0", "XLA Ops"),
        ("/device:TPU:0", "XLA Modules"),
        ("/host:CPU", "python"),
        ("/host:CPU", "pjrt_client"),
    ]
    names = [
        "fusion.1",
        "convolution.3",
        "dot.7",
        "all-reduce.2",
        "copy.5",
        "SyncTensorsGraph.1",
        "train_step",
        "PjRtCpuClient::Execute",
    ]
    lane = rng.choice(len(lanes), count, p=[0.85, 0.01, 0.09, 0.05])
    dur = rng.lognormal(np.log(12_000), 1.0, count).astype(np.int64) + 500
    start = np.zeros(count, np.int64)
    span = int(dur[lane == 0].sum() * 1.15)  # the op line is ~87% busy; other lines spread over it
    for i in range(len(lanes)):
        idx = np.flatnonzero(lane == i)
        if not len(idx):
            continue
        room = max(len(idx), span - int(dur[idx].sum()))
        gaps = rng.integers(0, 2 * room // len(idx) + 1, len(idx))
        start[idx] = t0 + np.concatenate([[0], np.cumsum(dur[idx] + gaps)[:-1]])
    name = np.where(
        lane == 1, 5, np.where(lane == 2, 6, np.where(lane == 3, 7, rng.integers(0, 5, count)))
    )
    step = 10 + (start - t0) // max(1, int((start.max() - t0) // 10 + 1))
    columns = {
        "host": _categorical(np.zeros(count), ["vm"]),
        "pid": pa.array(np.full(count, 4242, np.int32)),
        "rank": pa.array(np.zeros(count, np.int32)),
        "plane": _categorical(np.array([0, 0, 1, 1])[lane], ["/device:TPU:0", "/host:CPU"]),
        "line": _categorical(lane, [ln for _, ln in lanes]),
        "name": _categorical(name, names),
        "start_ns": pa.array(start),
        "dur_ns": pa.array(dur),
        "step": pa.array(step.astype(np.int64)),
        "hlo_op": _categorical(np.where(lane == 0, name, 0), names),
        "hlo_module": _categorical(np.zeros(count), ["SyncTensorsGraph.1"]),
    }
    schema = TABLES["trace_events"]
    return pa.table(
        {f.name: columns.get(f.name, pa.nulls(count, f.type)) for f in schema}, schema=schema
    )


def make_run(
    store: Path,
    name: str = "synthetic",
    steps: int = 200,
    trace_events: int = 20_000,
    recompiles: int = 12,
    seed: int = 0,
    device: bool = True,
    metrics: bool = False,
    parts: int = 1,
    analyze: bool | None = False,
) -> Path:
    """A complete synthetic run folder; returns it. `device` adds hlo_ops and trace_events,
    `metrics` the per-step metrics rows; the per-step tables are split into `parts` part files.
    analyze: False writes the detectors' findings, True the run's whole analysis (findings and
    analysis.json, as a run that ended), None nothing (for timing the analysis itself)."""
    rng = np.random.default_rng(seed)
    t0 = time.time_ns()
    run_dir = RunStore(store).new_run(name)
    recompile_steps = (
        np.unique(rng.integers(3, steps, recompiles)) if recompiles else np.array([], np.int64)
    )
    lengths = [41, 53, 37, 64, 29, 77]
    step_table = _steps(steps, rng, t0, recompile_steps)
    _write(run_dir, "steps", step_table, parts)
    _write(run_dir, "compiles", _compiles(step_table, recompile_steps, lengths))
    _write(run_dir, "fallbacks", _fallbacks(steps), parts)
    if metrics:
        _write(run_dir, "metrics", _metrics(step_table), parts)
    if device:
        _write(run_dir, "hlo_ops", _hlo_ops())
        _write(run_dir, "trace_events", _trace_events(trace_events, rng, t0))
        overview, device_steps = _device_view(t0)
        _write(run_dir, "xprof_overview", overview)
        _write(run_dir, "device_steps", device_steps)
    end = int(step_table.column("end_ns").to_numpy()[-1])
    proc: dict[str, Any] = {
        "backend": "torch_xla",
        "device_kind": "TPU v5 lite (synthetic)",
        "host": "vm",
        "pid": 4242,
        "rank": 0,
        "status": "finished",
        "start_ns": t0,
        "end_ns": end,
    }
    run = Run(run_dir)
    run.write_proc("vm", 4242, proc)
    run.update_meta(
        command=f"python examples/train_varlen.py  # synthetic, {steps} steps",
        warmup=DEFAULT_WARMUP,
        start_ns=t0,
        end_ns=end,
        status="finished",
        exit_code=0,
        synthetic=True,
        argv=["python", "examples/train_varlen.py"],
    )
    if analyze:
        from tpuscope.detect.run_analysis import analyze as analyze_run

        analyze_run(run)
    elif analyze is False:
        run.write_findings(_findings(run_dir))
    return run_dir
