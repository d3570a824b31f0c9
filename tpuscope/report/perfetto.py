"""Write a run's trace_events as a Chrome trace JSON (gzip), which Perfetto and chrome://tracing open.

One process per (host, plane) and one thread per line, "X" (complete) events with
times in microseconds relative to the first event (an epoch-µs float would lose
sub-microsecond precision; the origin is in otherData.t0_epoch_ns). Names are
JSON-escaped once per distinct name (they are dictionary columns), so a million
events cost one string join each.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import TextIO

import numpy as np
import pyarrow as pa

_ARGS = ("step", "hlo_module", "hlo_category")


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes (-1 for null) and the escaped dictionary of a string column."""
    array: pa.DictionaryArray = column.combine_chunks()  # type: ignore[assignment]  # encoded below when not
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    codes = array.indices.to_numpy(zero_copy_only=False)
    codes = np.where(array.is_null().to_numpy(zero_copy_only=False), -1, codes).astype(np.int64)
    return codes, [json.dumps(v) for v in array.dictionary.to_pylist()]


def _lanes(events: pa.Table) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(pid per event, tid per event, metadata records naming processes and threads)."""
    n = events.num_rows
    host, hosts = (
        _codes(events["host"]) if "host" in events.column_names else (np.zeros(n, np.int64), ['""'])
    )
    plane, planes = _codes(events["plane"])
    line, lines = _codes(events["line"])
    proc, pid = np.unique(np.stack([host, plane], axis=1), axis=0, return_inverse=True)
    lane, tid = np.unique(np.stack([pid.ravel(), line], axis=1), axis=0, return_inverse=True)
    meta = []
    for p, (h, pl) in enumerate(proc.tolist()):
        label = (
            json.loads(hosts[h]) + ": " if h >= 0 and json.loads(hosts[h]) else ""
        ) + json.loads(planes[pl])
        meta.append(
            json.dumps({"name": "process_name", "ph": "M", "pid": p, "args": {"name": label}})
        )
    for t, (p, ln) in enumerate(lane.tolist()):
        meta.append(
            json.dumps(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": p,
                    "tid": t,
                    "args": {"name": json.loads(lines[ln]) if ln >= 0 else ""},
                }
            )
        )
    return pid.ravel(), tid.ravel(), meta


def chrome_trace(events: pa.Table) -> bytes:
    """The events as a gzipped Chrome trace JSON (the `trace`/`perfetto` renderer)."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=3) as raw,
        io.TextIOWrapper(raw) as out,
    ):
        _write_events(events, out)
    return buffer.getvalue()


def write_chrome_trace(events: pa.Table, path: str | Path) -> int:
    """Write the events to `path` (appearing whole or not at all); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with gzip.open(tmp, "wt", compresslevel=3) as out:
            _write_events(events, out)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return events.num_rows


def _write_events(events: pa.Table, out: TextIO) -> None:
    n = events.num_rows
    start = events["start_ns"].to_numpy(zero_copy_only=False) if n else np.zeros(0, np.int64)
    t0 = int(start.min()) if n else 0
    ts = (start - t0) / 1000.0
    dur = events["dur_ns"].to_numpy(zero_copy_only=False) / 1000.0 if n else np.zeros(0)
    name_codes, names = _codes(events["name"]) if n else (np.zeros(0, np.int64), [])
    pid, tid, meta = _lanes(events) if n else (np.zeros(0, int), np.zeros(0, int), [])
    args = _args(events) if n else []
    out.write(f'{{"displayTimeUnit":"ns","otherData":{{"t0_epoch_ns":{t0}}},"traceEvents":[\n')
    out.write(",\n".join(meta))
    for i in range(n):
        name = names[name_codes[i]] if name_codes[i] >= 0 else '""'
        out.write(
            f',\n{{"ph":"X","name":{name},"pid":{pid[i]},"tid":{tid[i]},"ts":{ts[i]:.3f},'
            f'"dur":{dur[i]:.3f}{args[i] if args else ""}}}'
        )
    out.write("\n]}\n")


def _args(events: pa.Table) -> list[str]:
    """',"args":{...}' per event with its step, HLO module and category, or '' when none."""
    parts = []
    for col in _ARGS:
        if col not in events.column_names:
            continue
        if col == "step":
            values = events[col].to_numpy(zero_copy_only=False)
            valid = ~events[col].is_null().to_numpy(zero_copy_only=False)
            parts.append(
                [f'"step":{int(v)}' if ok else None for v, ok in zip(values, valid, strict=True)]
            )
        else:
            codes, texts = _codes(events[col])
            parts.append([f'"{col}":{texts[c]}' if c >= 0 else None for c in codes])
    if not parts:
        return []
    out = []
    for fields in zip(*parts, strict=True):
        kept = [f for f in fields if f]
        out.append(',"args":{' + ",".join(kept) + "}" if kept else "")
    return out
