"""The reader's events table, a slice of rows at a time: what the import path needs from it.

Why by slice: the import path must stay under 3x the xplane file's size in memory
(benchmarks/ingest.py; a 1M-event torch_xla CPU trace is a 41 MB file and a 32 MB
table). Every full-length temporary (epoch starts, ends, steps, a pandas frame of
the XLA-op rows, which on a CPU trace are half the events) costs 4-40 MB more, so the
device work, the step markers and the traced span are gathered SLICE_ROWS rows at a
time, and the store's trace_events table keeps the reader's columns as they are (zero
copy) next to new columns (epoch start, step, host, pid, rank) made slice by slice.
Fixed-size slices, not the reader's record batches (one per line), because a trace
of many short lines has hundreds of batches and per-batch Python work would cost
more than the numpy work.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from tpuscope.analyze.device_time import (
    DEVICE_STEP_LINES,
    DISPATCH_EVENT,
    HOST_XLA_DEVICE,
    StepLookup,
    steps_at,
    work_pairs,
)
from tpuscope.parse.xplane_wire import member
from tpuscope.schema import TABLES

SLICE_ROWS = 1 << 16
PROCESS_COLUMNS = ("host", "pid", "rank")


def slices(table: pa.Table, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """Those columns, SLICE_ROWS rows at a time, each slice one contiguous batch (a copy of
    at most SLICE_ROWS rows: only the columns asked for)."""
    part = table.select(columns)
    for start in range(0, part.num_rows, SLICE_ROWS):
        yield from part.slice(start, SLICE_ROWS).combine_chunks().to_batches()


class _PairKeys:
    """Each event's (plane, line) as one int64 key per slice. A dictionary is decoded once for
    as long as the slices share it (the reader's columns have one), and what a slice's keys
    mean for device work is worked out once per pair of dictionaries."""

    def __init__(self) -> None:
        self._dicts: dict[str, tuple[pa.Array, list[str]]] = {}
        self._work: dict[tuple[int, int], tuple[Any, ...]] = {}

    def codes(self, batch: pa.RecordBatch, column: str) -> tuple[np.ndarray, list[str]]:
        """Codes and labels of a string column (dictionary-encoded or not); null is the label ''
        at the end, so codes index the labels without a special case."""
        read = batch.column(column)
        array = read if isinstance(read, pa.DictionaryArray) else read.dictionary_encode()
        last = self._dicts.get(column)
        if last is None or not last[0].equals(array.dictionary):
            labels = ["" if v is None else str(v) for v in array.dictionary.to_pylist()] + [""]
            last = self._dicts[column] = (array.dictionary, labels)
        indices = array.indices
        if indices.null_count:
            indices = indices.fill_null(len(last[1]) - 1)
        return indices.to_numpy(zero_copy_only=False).astype(np.int64), last[1]

    def keys(self, batch: pa.RecordBatch) -> tuple[np.ndarray, list[str], list[str]]:
        planes, plane_labels = self.codes(batch, "plane")
        lines, line_labels = self.codes(batch, "line")
        return planes * len(line_labels) + lines, plane_labels, line_labels

    def work(
        self,
        planes: list[str],
        lines: list[str],
        work: set[tuple[str, str]],
        devices: dict[str, int],
    ) -> tuple[Any, ...]:
        """(keys that are device work, device code of each plane, host-plane flag of each plane)."""
        key = (id(planes), id(lines))
        if key not in self._work:  # the labels are kept in the value, so their ids stay unique
            plane_at, line_at = (
                {p: i for i, p in enumerate(planes)},
                {x: i for i, x in enumerate(lines)},
            )
            wanted = [
                plane_at[p] * len(lines) + line_at[x]
                for p, x in work
                if p in plane_at and x in line_at
            ]
            self._work[key] = (
                np.array(sorted(wanted), dtype=np.int64),
                np.array([devices.get(p, -1) for p in planes], dtype=np.int32),
                np.array([not p.startswith("/device:") for p in planes], dtype=bool),
                planes,
                lines,
            )
        return self._work[key][:3]


def plane_line_pairs(table: pa.Table) -> set[tuple[str, str]]:
    """Every (plane, line) the table holds."""
    found: set[tuple[str, str]] = set()
    coder = _PairKeys()
    for batch in slices(table, ["plane", "line"]):
        keys, planes, lines = coder.keys(batch)
        width = len(lines)
        found.update((planes[k // width], lines[k % width]) for k in np.unique(keys).tolist())
    return found


def _work_rows(
    batch: pa.RecordBatch, coder: _PairKeys, work: set[tuple[str, str]], devices: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(mask of the slice's device-work events, their device codes), as device_ops decides."""
    keys, planes, lines = coder.keys(batch)
    wanted, code_of_plane, host = coder.work(planes, lines, work, devices)
    if not work:  # no device plane: XLA's CPU thunks, host events with an hlo_op
        mask = host[keys // len(lines)] & batch.column("hlo_op").is_valid().to_numpy(
            zero_copy_only=False
        )
        return mask, np.zeros(int(mask.sum()), dtype=np.int32)
    mask = member(keys, wanted)
    return mask, code_of_plane[keys[mask] // len(lines)]


def work_ops(table: pa.Table, offset: int) -> pd.DataFrame:
    """device_ops of the whole table (start_ns in epoch ns), gathered slice by slice. The device
    is a categorical with sorted categories (groupby order as for strings), not a string per row."""
    work = work_pairs(plane_line_pairs(table))
    names = sorted({p for p, _ in work}) if work else [HOST_XLA_DEVICE]
    if not work and "hlo_op" not in table.column_names:
        names = []
    devices = {name: i for i, name in enumerate(names)}
    starts, durs, codes = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int32)]
    coder = _PairKeys()
    columns = ["plane", "line", "start_ns", "dur_ns"] + ([] if work else ["hlo_op"])
    for batch in slices(table, columns) if names else ():
        mask, device = _work_rows(batch, coder, work, devices)
        starts.append(batch.column("start_ns").to_numpy()[mask] + offset)
        durs.append(batch.column("dur_ns").to_numpy()[mask])
        codes.append(device)
    device_column = pd.Categorical.from_codes(
        np.concatenate(codes), categories=pd.Index(names, dtype=object)
    )
    return pd.DataFrame(
        {
            "start_ns": np.concatenate(starts),
            "dur_ns": np.concatenate(durs),
            "device": device_column,
        },
        copy=False,
    )


def step_markers(table: pa.Table, offset: int) -> pd.DataFrame:
    """The events that mark steps, start_ns in epoch ns: those with a step_num stat
    (xp.StepTrace, StepTraceAnnotation), a TPU device's own "Steps" line and its "XLA Modules"
    line (plane, line, name: device_time.step_windows prefers them, as they span the device's
    work), and the host's dispatch of each module (which tell a device's backlog from its
    steps)."""
    frames = []
    if "step_num" in table.column_names:
        frames.append(
            table.select(["start_ns", "dur_ns", "step_num"])
            .filter(table["step_num"].is_valid())
            .to_pandas()
        )
    if {"plane", "line", "name"} <= set(table.column_names):
        line = pa.compute.cast(table["line"], pa.string())
        plane = pa.compute.cast(table["plane"], pa.string())
        name = pa.compute.cast(table["name"], pa.string())
        kept = pa.compute.or_(
            pa.compute.and_(
                pa.compute.is_in(line, pa.array(DEVICE_STEP_LINES)),
                pa.compute.starts_with(plane, "/device:"),
            ),
            pa.compute.and_(  # the host's dispatch of each module (device_time._dispatches)
                pa.compute.starts_with(plane, "/host:"),
                pa.compute.match_substring_regex(name, DISPATCH_EVENT),
            ),
        )
        if pa.compute.any(kept).as_py():
            device = table.filter(kept).select(["plane", "line", "name", "start_ns", "dur_ns"])
            frames.append(
                pa.Table.from_arrays(
                    [pa.compute.cast(device[c], pa.string()) for c in ("plane", "line", "name")]
                    + [device["start_ns"], device["dur_ns"]],
                    names=["plane", "line", "name", "start_ns", "dur_ns"],
                ).to_pandas()
            )
    if not frames:
        return pd.DataFrame({"start_ns": np.zeros(0, np.int64), "dur_ns": np.zeros(0, np.int64)})
    frame = pd.concat(frames, ignore_index=True)
    frame["start_ns"] += offset
    return frame


def time_span(table: pa.Table, offset: int) -> tuple[int, int] | None:
    """(first event start, last event end) in epoch ns, None for no events."""
    if table.num_rows == 0:
        return None
    first = int(pa.compute.min(table["start_ns"]).as_py())
    last = max(
        int((b.column("start_ns").to_numpy() + b.column("dur_ns").to_numpy()).max())
        for b in slices(table, ["start_ns", "dur_ns"])
    )
    return first + offset, last + offset


def _new_columns(
    table: pa.Table, host: str, pid: int, offset: int, lookup: StepLookup
) -> dict[str, pa.ChunkedArray]:
    """host, pid, rank (the schema's types), epoch start_ns and step, SLICE_ROWS rows a chunk;
    the constant columns' chunks are slices of one array."""
    schema, n = TABLES["trace_events"], table.num_rows
    longest = min(n, SLICE_ROWS)
    constants = {
        "host": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(longest, np.int8), pa.int8()), pa.array([host])
        ),
        **{
            c: pa.array(np.full(longest, v, dtype=schema.field(c).type.to_pandas_dtype()))
            for c, v in (("pid", pid), ("rank", 0))
        },
    }
    columns: dict[str, list[pa.Array]] = {c: [] for c in (*PROCESS_COLUMNS, "start_ns", "step")}
    for at in range(0, n, SLICE_ROWS):
        start = table["start_ns"].slice(at, SLICE_ROWS).to_numpy() + offset
        step = steps_at(start, lookup)
        columns["start_ns"].append(pa.array(start))
        columns["step"].append(pa.array(step, mask=step < -1))
        for c, array in constants.items():
            columns[c].append(array.slice(0, len(start)))
    types = {
        **{c: a.type for c, a in constants.items()},
        "start_ns": pa.int64(),
        "step": pa.int64(),
    }
    return {
        c: pa.chunked_array(chunks, type=types[c])  # type: ignore[call-overload]  # its stubs type each concrete DataType, not DataType
        for c, chunks in columns.items()
    }


def store_events(table: pa.Table, host: str, pid: int, offset: int, lookup: StepLookup) -> pa.Table:
    """The reader's table as trace_events: process fields, epoch start_ns and step added
    (_new_columns), the reader's other columns kept as they are (zero copy). Columns a trace
    lacks are left out and dictionary indices stay as narrow as the reader made them:
    read_table(schema=...) fills and widens both."""
    added = _new_columns(table, host, pid, offset, lookup)
    names = [
        f.name for f in TABLES["trace_events"] if f.name in added or f.name in table.column_names
    ]
    arrays = [added[c] if c in added else table[c] for c in names]
    return pa.Table.from_arrays(
        arrays, schema=pa.schema([pa.field(c, a.type) for c, a in zip(names, arrays, strict=True)])
    )


def count_modules(table: pa.Table, counts: dict[str, int]) -> None:
    """Events per HLO module, added to counts: which graph a step ran (the detectors read it from
    meta). Chunk by chunk, no combined copy; first-seen order, as value_counts of the whole column."""
    if "hlo_module" not in table.column_names:
        return
    for chunk in table["hlo_module"].chunks:
        counted = pa.compute.value_counts(chunk)
        values, times = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
        for value, count in zip(values, times, strict=True):
            if value is not None:
                counts[value] = counts.get(value, 0) + int(count or 0)
