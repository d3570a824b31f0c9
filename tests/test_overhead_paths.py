"""What a profiled process pays before and outside its steps (issue 17): imports, the row buffer,
the deferred torch_xla step rows and the JAX collector's own cost figures. Real runs, no mocks;
speed itself is measured in benchmarks/ (overhead.py, startup.py), not here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

import tpuscope
from tests.conftest import run_tpuscope
from tpuscope.parse.pt_xla_debug import DebugFileTail
from tpuscope.schema import TABLES
from tpuscope.store.buffer import PartWriter
from tpuscope.store.columns import Coded, Repeat
from tpuscope.store.parts import read_table

HEAVY = ("pyarrow", "pandas", "numpy", "tpuscope.analysis", "tpuscope.schema")
PROBE = f"import json, sys; print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"


def test_a_profiled_process_without_a_backend_imports_nothing_heavy(tmp_path: Path) -> None:
    proc = run_tpuscope("run", "--store", str(tmp_path), "python", "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == dict.fromkeys(HEAVY, False)
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not list(run.glob("*/part-*.parquet"))  # no rows: nothing written, nothing analysed
    assert "no rows recorded" in proc.stderr and "run saved as" in proc.stderr
    (proc_meta,) = (run / "procs").glob("*.json")
    assert json.loads(proc_meta.read_text())["status"] == "finished"


def test_the_launcher_imports_no_analysis_stack_for_a_run_without_rows(tmp_path: Path) -> None:
    """`python -X importtime` lists every module the launcher imported (the child is not traced)."""
    cmd = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "tpuscope",
        "run",
        "--quiet",
        "--store",
        str(tmp_path),
        sys.executable,
        "-c",
        "pass",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "tpuscope.launch.program" in imported and "click" in imported
    assert not imported & {"pandas", "pyarrow", "numpy", "rich", "tpuscope.analysis"}


def test_limits_still_get_judged_on_a_run_without_rows(tmp_path: Path) -> None:
    proc = run_tpuscope(
        "run", "--store", str(tmp_path), "--max-recompiles", "0", "python", "-c", "pass"
    )
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (run / "analysis.json").is_file()


def test_the_row_buffer_needs_no_pyarrow_until_it_writes(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    code = (
        "import sys; from tpuscope.collect.session import Session; "
        f"s = Session({str(tmp_path / 'r')!r}); s.add('steps', {{'step': 0}}); "
        "print('pyarrow' in sys.modules); s.flush(); print('pyarrow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["False", "True"], proc.stderr


def test_buffered_rows_and_column_chunks_make_the_table_pyarrow_would(tmp_path: Path) -> None:
    """Dict rows and column chunks (with columns left out, and with repeated process columns)
    in one part, equal to from_pylist of the same rows: the same types, dictionary columns and nulls."""
    writer = PartWriter(tmp_path, tag="t")
    rows = [
        {
            "host": "h",
            "pid": 1,
            "rank": 0,
            "step": 0,
            "index": 0,
            "time_ns": 5,
            "cause": "c",
            "frames": ["f (a.py:1)"],
            "input_gb": 0.5,
        }
    ]
    chunk = {
        "host": ["h", "h"],
        "pid": [1, 1],
        "rank": [0, 0],
        "step": [1, 2],
        "index": [1, 2],
        "time_ns": [6, 7],
        "input_shapes": [["f32[2]"], None],
    }
    repeated = {
        "host": Repeat("h", 2),
        "pid": Repeat(1, 2),
        "rank": Repeat(0, 2),
        "step": [3, 4],
        "index": [3, 4],
        "input_shapes": [None, ["f32[1]"]],
    }  # the session's process columns
    writer.extend("compiles", rows)
    writer.extend_columns("compiles", chunk)
    writer.extend_columns("compiles", repeated)
    assert writer.pending() == 5
    assert writer.flush() == 5 and writer.pending() == 0
    got = read_table(tmp_path, "compiles")
    as_rows = rows + [{name: values[i] for name, values in chunk.items()} for i in range(2)]
    as_rows += [
        {
            name: values.value if isinstance(values, Repeat) else values[i]
            for name, values in repeated.items()
        }
        for i in range(2)
    ]
    want = pa.Table.from_pylist(as_rows, schema=TABLES["compiles"])
    assert got.equals(want.combine_chunks())
    assert writer.flush() == 0 and len(list((tmp_path / "compiles").glob("part-*"))) == 1


def test_numpy_and_coded_columns_make_the_rows_lists_would(tmp_path: Path) -> None:
    """The torch_xla flush's chunks (numpy arrays, strings as codes into names, repeated
    constants, a left-out column) after a chunk of lists: the same rows as from_pylist."""
    import numpy as np

    writer = PartWriter(tmp_path, tag="t")
    lists = {
        "host": ["h"],
        "pid": [1],
        "rank": [0],
        "step": [0],
        "start_ns": [1],
        "end_ns": [3],
        "wall_ns": [2],
        "boundary": ["mark_step"],
        "compiles": [1],
        "executions": [1],
        "execute_ns": [7],
        "graph_hashes": [["g"]],
    }
    boundaries = ["sync", "mark_step", "never used"]
    arrays = {
        "host": Repeat("h", 3),
        "pid": Repeat(1, 3),
        "rank": Repeat(0, 3),
        "step": np.arange(1, 4),
        "start_ns": np.array([3, 5, 8]),
        "end_ns": np.array([5, 8, 9]),
        "wall_ns": np.array([2, 3, 1]),
        "boundary": Coded(np.array([1, 0, 1]), boundaries),
        "compiles": np.zeros(3, dtype=np.int64),
        "compile_ns": Repeat(0, 3),
        "executions": np.ones(3, dtype=np.int64)[::1],
        "fallback_ops": np.array([0, 2, 0]),
        "transfers_from_device": Repeat(0, 3),
        "graph_hashes": Repeat([], 3),
    }
    writer.extend_columns("steps", lists)
    writer.extend_columns("steps", arrays)
    assert writer.pending() == 4 and writer.flush() == 4
    got = read_table(tmp_path, "steps").to_pylist()
    as_rows = [{name: values[0] for name, values in lists.items()}]
    for i in range(3):
        row = {}
        for name, values in arrays.items():
            if isinstance(values, Repeat):
                row[name] = values.value
            elif isinstance(values, Coded):
                row[name] = values.names[int(values.codes[i])]
            else:
                row[name] = int(values[i])
        as_rows.append(row)
    assert got == pa.Table.from_pylist(as_rows, schema=TABLES["steps"]).to_pylist()
    assert [r["boundary"] for r in got] == ["mark_step", "mark_step", "sync", "mark_step"]


XLA_GC_PROBE = """
import gc, json, sys
import tpuscope
from tpuscope.collect.xla import counters
counters.FULL_INTERVAL_S = 1e9  # no periodic full read inside the loop: its sample buffers are not per step
with tpuscope.profile(store=sys.argv[1], name="xla-gc", warmup=1) as run:
    import torch, torch_xla
    device = torch_xla.device()
    w = torch.randn(8, 8).to(device)
    for _ in range(20):  # compiled, counters known
        w = w * 0.5 + 1.0
        torch_xla.sync()
    from tpuscope.collect import autostart
    autostart.active_session().writer.prepare()  # pyarrow's import (its own thread) is over
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(int(sys.argv[2])):
        w = w * 0.5 + 1.0
        torch_xla.sync()
    gc.collect()  # what is left is alive: held until the flush
    grown = len(gc.get_objects()) - before
print(json.dumps({"grown": grown, "steps": len(tpuscope.load_run(run.path).steps)}))
"""


def test_a_torch_xla_loop_leaves_nothing_per_step_for_the_garbage_collector(tmp_path: Path) -> None:
    """Until the flush, a plain profiled step keeps no object Python's collector tracks (its
    integers go to a PlainLog, collect/xla/plain.py); a StepRecord and its tuples per step made
    a profiled loop collect where the bare one does not. Its rows are all still written."""
    steps = 1500
    proc = subprocess.run(
        [sys.executable, "-c", XLA_GC_PROBE, str(tmp_path), str(steps)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PJRT_DEVICE": "CPU"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["grown"] < steps / 10, (
        f"{result['grown']} more tracked objects after {steps} steps"
    )
    assert result["steps"] >= steps + 20


def test_the_debug_tail_reads_each_step_up_to_its_end(tmp_path: Path) -> None:
    """Text parsed later (in the flush thread) lands in the step whose end it preceded."""
    block = (
        "Compilation Analysis: " + "=" * 20 + "\nCompilation Analysis: Graph Info: \n"
        "Compilation Analysis:   Graph Hash: {h}\nCompilation Analysis: " + "=" * 20 + "\n"
    )
    path = tmp_path / "debug.txt"
    tail = DebugFileTail(path)
    path.write_text(block.format(h="aaa"))
    first_end = tail.size()
    with path.open("a") as handle:
        handle.write(block.format(h="bbb"))
    assert [r.graph_hash for r in tail.poll(first_end)[0]] == ["aaa"]
    assert tail.poll(first_end) == ([], [])
    assert [r.graph_hash for r in tail.poll(tail.size())[0]] == ["bbb"]


JAX_PROGRAM = """
import jax, jax.numpy as jnp
step = jax.jit(lambda x: (x * 2.0).sum())
x = jnp.ones((8, 8))
for _ in range(12):
    jax.block_until_ready(step(x))
"""


def test_a_jax_run_times_its_own_hooks_per_step(tmp_path: Path) -> None:
    script = tmp_path / "jax_steps.py"
    script.write_text(JAX_PROGRAM)
    proc = run_tpuscope("run", "--quiet", "--store", str(tmp_path / "store"), "python", str(script))
    assert proc.returncode == 0, proc.stderr
    run = tpuscope.load_run("latest", store=tmp_path / "store")
    (cost,) = [p["profiler_cost"] for p in run.meta["processes"]]
    assert cost["hook_calls"] + cost["compile_hook_calls"] == len(run.steps) > 0
    assert cost["hook_ns"] > 0 and cost["flush_cpu_ns"] > 0
    assert run.steps["step"].tolist() == list(range(len(run.steps)))


def _sync_batch(steps: int, events_of: Any) -> tuple[Any, Any, Any, list[Any]]:
    """`steps` emitted JAX steps and their events (what the collector's logs hold at a flush)."""
    from tpuscope.collect.jax.rows import EventLog, OpenStep, StepLog

    log, events = StepLog(), EventLog()
    for step in range(steps):
        record = OpenStep()
        record.step, record.jit_calls, record.boundary = step, 1, "jit:f"
        log.emit(record, 10 * step, 10 * step + 7)
        for key in events_of(step):
            events.add(step, key)
    taken, ids = events.take(log.last_step())
    return log.take(), taken, ids, events.keys


def test_jax_rows_of_one_sync_a_step_are_those_built_step_by_step(
    tmp_path: Path, monkeypatch
) -> None:
    """The flush's column-wise rows for batches of one host sync a step (rows.StepColumns) are the
    rows the step-by-step path gives, as written to Parquet; other batches take that path."""
    from tpuscope.collect.jax.rows import HOST_SYNC, JIT_CALL, StepColumns

    def sync(location: str, kind: str = "block_until_ready", library: str | None = None) -> tuple:
        return (HOST_SYNC, kind, location, library)

    patterns = {
        "one a step": (lambda s: [sync("/u/t.py:3")], True),
        "two lines": (lambda s: [sync("/u/t.py:3" if s % 3 else "/u/t.py:9")], True),
        "a read in a library": (lambda s: [sync("/u/t.py:4", "float", "lib/x.py:2")], True),
        "steps without": (lambda s: [sync("/u/t.py:3")] if s % 4 else [], True),
        "two a step": (lambda s: [sync("/u/t.py:3")] * 2, False),
        "another jitted call": (
            lambda s: [(JIT_CALL, "g", None, None)] if s == 5 else [sync("/u/t.py:3")],
            False,
        ),
    }
    for label, (events_of, column_wise) in patterns.items():
        batch = _sync_batch(40, events_of)
        fast = StepColumns(*batch).tables()
        with monkeypatch.context() as patched:
            patched.setattr(StepColumns, "_single_syncs", lambda *args: False)
            slow = StepColumns(*batch).tables()
        assert fast.keys() == slow.keys() == {"steps", "metrics", "call_sites"}, label
        assert isinstance(fast["metrics"]["kind"], Repeat) is column_wise, label
        for table in fast:
            written = []
            for i, columns in enumerate((fast[table], slow[table])):
                folder = tmp_path / label.replace(" ", "-") / table / str(i)
                folder.mkdir(parents=True)
                writer = PartWriter(folder, tag="t")
                count = len(columns["step"])
                writer.extend_columns(
                    table,
                    {
                        "host": Repeat("h", count),
                        "pid": Repeat(1, count),
                        "rank": Repeat(0, count),
                        **columns,
                    },
                )
                writer.flush()
                written.append(read_table(folder, table))
            assert written[0].equals(written[1]), (label, table)
