"""Read an XSpace (`*.xplane.pb`, what jax, torch_xla, TorchTPU and TensorFlow profilers
write) into a pyarrow Table: one row per event of every line of every plane.

Why a hand-written wire decoder: it was measured against every library that reads
these files, on a 1.12M-event JAX CPU trace (28 MB; figures in docs/device_view.md):
iterating `jax.profiler.ProfileData` events in Python peaks at 19x the file size and
misses the stats TPU ops keep on their metadata; upb (protobuf's own parser) holds
the whole message at 6.4x the file size and is only ~2x faster, because every event
still needs a Python object; xprof's C++ events_db and trace_viewer converters are
slower still and peak at 39x / 59x. The numpy decoder (xplane_wire) does no Python
work per event: ~7-9x the ProfileData loop's events/s at 2.6x the file size. upb
still reads what is small (plane metadata, lines under 64 KB), and `engine="upb"`
is a strict whole-file parse that also validates the stat payloads the wire engine
skips unparsed.

Columns: plane, line, name (dictionary strings), start_ns, dur_ns (int64, exact:
line.timestamp_ns + offset_ps // 1000, truncated toward zero like xprof's PicoToNano),
then the stats present in the file (always=... forces some): hlo_op, hlo_module,
hlo_category, source, tf_op, graph_hash (dictionary strings), program_id (uint64:
XLA fingerprints use all 64 bits), flops, bytes_accessed, step_num (int64).
Plane-level stats (device_type_string, peak_teraflops_per_second,
profile_start_time, ...) and the hostnames are JSON in the schema metadata
(`space_info(table)`). Errors: XSpaceDecodeError, a ValueError naming the file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from tpuscope.parse import xplane_build
from tpuscope.parse import xplane_jit as jit
from tpuscope.parse import xplane_wire as wire
from tpuscope.parse.xplane_meta import (
    NumCols,
    PlaneMeta,
    merge_stats,
    upb_events,
    wire_stats,
)
from tpuscope.parse.xplane_proto import (
    WireError,
    XEvent,
    XLine,
    XPlane,
    XSpace,
    fields,
    text,
    varint,
)
from tpuscope.parse.xplane_table import META_KEY, TableBuilder

STRING_STATS = ("hlo_op", "hlo_module", "hlo_category", "source", "tf_op", "graph_hash")
NUMERIC_STATS: dict[str, Any] = {
    "program_id": np.uint64,
    "flops": np.int64,
    "bytes_accessed": np.int64,
    "step_num": np.int64,
}
ALWAYS = ("hlo_op", "hlo_module", "program_id", "flops", "bytes_accessed")
SMALL_LINE_BYTES = (
    1 << 16
)  # below this, numpy's per-call overhead exceeds upb's cost: upb reads the line
BATCH_EVENTS = 1 << 15


class XSpaceDecodeError(ValueError):
    """The file is not a decodable XSpace protobuf; the message starts with its path."""


def read_xspace(
    path: str | os.PathLike[str],
    *,
    engine: str = "wire",
    numeric_stats: dict[str, Any] | None = None,
    string_stats: Sequence[str] = STRING_STATS,
    always: Sequence[str] = (),
) -> pa.Table:
    """The events of one xplane.pb as a Table (columns in the module docstring)."""
    if engine not in ("wire", "upb"):
        raise ValueError(f"unknown engine {engine!r}: use 'wire' or 'upb'")
    builder = TableBuilder(
        dict(NUMERIC_STATS if numeric_stats is None else numeric_stats), tuple(string_stats), always
    )
    data = _read_bytes(path)
    try:
        (_read_wire if engine == "wire" else _read_upb)(data, builder)
    except (WireError, DecodeError) as exc:
        raise XSpaceDecodeError(f"{os.fspath(path)}: not a valid XSpace protobuf ({exc})") from exc
    del data  # the columns never point into the file bytes: free them before the table is built
    _trim_heaps()
    return builder.table()


def _trim_heaps() -> None:
    """Hand the decoding's freed memory back to the OS. The worker threads' temporaries were
    allocated in glibc's per-thread arenas, which keep freed memory for their next use: without
    this the import path peaked 25 MB (0.6x the file) higher than when one thread decoded
    (benchmarks/ingest.py). A no-op where the C library has no malloc_trim."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def space_info(table: pa.Table) -> dict[str, Any]:
    """{hostnames: [...], planes: {plane name: {stat: value}}} of a table read_xspace made."""
    raw = (table.schema.metadata or {}).get(META_KEY)
    return json.loads(raw) if raw else {"hostnames": [], "planes": {}}


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise XSpaceDecodeError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    if not data:
        raise XSpaceDecodeError(f"{name}: empty file, not an XSpace protobuf")
    if data[:2] == b"\x1f\x8b":
        raise XSpaceDecodeError(
            f"{name}: gzip-compressed; decompress it first (xplane.pb files are raw protobuf)"
        )
    return data


# --- engine "upb": whole-file parse ---------------------------------------------------
def _read_upb(data: bytes, builder: TableBuilder) -> None:
    space = XSpace.FromString(data)
    builder.hostnames = [text(h) for h in space.hostnames]
    for plane in space.planes:
        meta = _plane_meta(plane, builder)
        code = builder.planes.code(meta.name)
        for line in plane.lines:
            if len(line.events):
                _add_upb_line(line, meta, code, builder)


def _plane_meta(plane: Any, builder: TableBuilder) -> PlaneMeta:
    meta = PlaneMeta(
        plane, builder.names, builder.strdicts, builder.want_numeric, builder.want_string
    )
    builder.module_by_pid.update(meta.module_by_pid)
    if meta.stats:
        builder.plane_stats[meta.name] = meta.stats
    return meta


def _add_upb_line(line: Any, meta: PlaneMeta, plane_code: int, builder: TableBuilder) -> None:
    name = text(line.name)
    mid, offset, duration, ev_num, ev_str = upb_events(
        line.events, meta, builder.want_numeric, builder.strdicts
    )
    rows = meta.lookup(mid)
    num_cols, str_cols = merge_stats(
        meta,
        rows,
        ev_num,
        ev_str,
        builder.want_numeric,
        builder.want_string,
        name,
        builder.strdicts,
        builder.module_by_pid,
    )
    builder.add(
        plane_code,
        builder.lines.code(name),
        meta.name_code[rows],
        line.timestamp_ns + ps_to_ns(offset),
        ps_to_ns(duration),
        num_cols,
        str_cols,
    )


def ps_to_ns(ps: np.ndarray) -> np.ndarray:
    """Integer picoseconds -> ns, truncated toward zero (C++ division, as xprof's PicoToNano)."""
    ns = ps // 1000
    negative = (ps < 0) & (ps % 1000 != 0)
    return ns + negative if negative.any() else ns


# --- engine "wire": numpy decoding of the big lines -------------------------------------
# The numpy work runs on a pool of WORKERS threads (numpy releases the GIL in its loops): the
# big lines are framed side by side, then each line's batches are decoded at most AHEAD
# batches in front of the main thread, which alone touches the string dictionaries and the
# builder, in file order (so the table's rows and dictionary codes do not depend on timing).
WORKERS = min(2, os.cpu_count() or 1)
AHEAD = 1
JIT = jit.available()  # the compiled decoder first (xplane_jit), xplane_wire for the rest
# A file of this size or more builds the compiled decoder when it is missing (a child process
# compiles it once per install, ~20 s of CPU; setup.sh builds it at install); smaller files use
# it when it is there (loading it costs milliseconds) and the numpy decoder otherwise.
JIT_MIN_BYTES = 32 << 20


def _read_wire(data: bytes, builder: TableBuilder) -> None:
    buf = np.frombuffer(data, dtype=np.uint8)
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="tpuscope-xplane") as pool:
        for field_no, wire_type, _, start, end in fields(data, 0, len(data)):
            if field_no == 4 and wire_type == 2:
                builder.hostnames.append(text(data[start:end]))
            if field_no != 1:
                continue  # errors, warnings
            if wire_type != 2:
                raise WireError(f"XSpace.planes has wire type {wire_type}")
            _read_plane(data, buf, start, end, builder, pool)


def _read_plane(
    data: bytes, buf: np.ndarray, start: int, end: int, builder: TableBuilder, pool: Executor
) -> None:
    """Lines are read with numpy; the rest of the plane (metadata maps, stats) is copied
    verbatim into a small message that upb parses."""
    lines, rest = [], []
    for field_no, wire_type, field_start, value_start, value_end in fields(data, start, end):
        if field_no == 3 and wire_type == 2:
            lines.append((value_start, value_end))
        else:
            rest.append(data[field_start:value_end])
    meta = _plane_meta(XPlane.FromString(b"".join(rest)), builder)
    del rest
    code = builder.planes.code(meta.name)
    want_ids = np.fromiter(meta.want.keys(), dtype=np.int64, count=len(meta.want))
    compiled = (
        JIT
        and any(b - a >= SMALL_LINE_BYTES for a, b in lines)
        and xplane_build.load(build=len(data) >= JIT_MIN_BYTES)
    )
    wanted = (want_ids, jit.want_table(want_ids) if compiled else None)
    for line_start, line_end in lines:
        if line_end - line_start >= SMALL_LINE_BYTES:
            header = _line_header(data, buf, line_start, line_end, compiled)
            _read_line(data, buf, header, meta, code, builder, wanted, pool)
            _trim_heaps()  # the line's temporaries, freed in the workers' arenas
            continue
        line = XLine.FromString(data[line_start:line_end])
        if len(line.events):
            _add_upb_line(line, meta, code, builder)


def _line_header(
    data: bytes, buf: np.ndarray, start: int, end: int, compiled: bool = False
) -> tuple[bytes, int, list[Any]]:
    """(name, timestamp_ns, runs of event spans) of one XLine, in any field order."""
    name, timestamp, runs = b"", 0, []
    pos = start
    while pos < end:
        field_start = pos
        field_no, wire_type, _, value_start, value_end = next(fields(data, pos, end))
        if field_no == 4 and wire_type == 2:
            spans = jit.event_spans(buf, field_start, end) if compiled else None
            starts, ends, run_end = spans or wire.event_spans(buf, field_start, end)
            runs.append((starts, ends))
            pos = run_end
            continue
        if field_no == 3 and wire_type == 0:
            value = varint(data, value_start, end)[0]
            timestamp = value - (1 << 64) if value >= (1 << 63) else value
        elif field_no == 2 and wire_type == 2:
            name = data[value_start:value_end]
        pos = value_end
    return name, timestamp, runs


def _ahead(pool: Executor, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[Any]:
    """fn of each item on the pool, yielded in order, at most AHEAD results held (bounded memory)."""
    pending: deque[Future[Any]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def _read_line(
    data: bytes,
    buf: np.ndarray,
    header: tuple[bytes, int, list[Any]],
    meta: PlaneMeta,
    plane_code: int,
    builder: TableBuilder,
    wanted: tuple[np.ndarray, np.ndarray | None],
    pool: Executor,
) -> None:
    raw_name, timestamp, runs = header
    name = text(raw_name)
    line_code = builder.lines.code(name)
    batches = [
        (starts[i : i + BATCH_EVENTS], ends[i : i + BATCH_EVENTS])
        for starts, ends in runs
        for i in range(0, len(starts), BATCH_EVENTS)
    ]

    def numeric(batch: tuple[np.ndarray, np.ndarray]) -> tuple[Any, ...]:
        return _decode_numbers(buf, *batch, *wanted)

    for (starts, ends), decoded in zip(batches, _ahead(pool, numeric, batches), strict=True):
        mid, offset, duration, ev_num, ev_str = _finish_events(
            data, starts, ends, decoded, meta, builder
        )
        rows = meta.lookup(mid)
        num_cols, str_cols = merge_stats(
            meta,
            rows,
            ev_num,
            ev_str,
            builder.want_numeric,
            builder.want_string,
            name,
            builder.strdicts,
            builder.module_by_pid,
        )
        builder.add(
            plane_code,
            line_code,
            meta.name_code[rows],
            timestamp + ps_to_ns(offset),
            ps_to_ns(duration),
            num_cols,
            str_cols,
        )


def _decode_numbers(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    want_ids: np.ndarray,
    table: np.ndarray | None = None,
) -> tuple[Any, ...]:
    """The numeric half of a batch (any thread): the events and their wanted stats, decoded by
    the compiled decoder when there is a lookup `table`, else (or when it declines) lockstep."""
    if table is not None:
        decoded = jit.decode_batch(buf, starts, ends, table)
        if decoded is not None:
            return decoded
    mid, offset, duration, ev, stat_starts, stat_ends, tail = wire.lockstep_events(
        buf, starts, ends, len(buf), want_ids
    )
    stats = wire.lockstep_stats(buf, stat_starts, stat_ends, len(buf)) if ev.size else None
    return mid, offset, duration, ev, stats, tail


def _finish_events(
    data: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    decoded: tuple[Any, ...],
    meta: PlaneMeta,
    builder: TableBuilder,
) -> tuple[Any, ...]:
    """The main thread's half: stat values as dictionary codes, the few events left with many
    fields through upb."""
    mid, offset, duration, ev, stats, tail = decoded
    ev_num: NumCols = {}
    ev_str: NumCols = {}
    if stats is not None:
        mids, kinds, nums, str_starts, str_lens = stats
        ev_num, ev_str = wire_stats(
            data,
            meta,
            ev,
            mids,
            kinds,
            nums,
            str_starts,
            str_lens,
            builder.want_numeric,
            builder.strdicts,
        )
    if tail.size:
        events = [
            XEvent.FromString(data[a:b])
            for a, b in zip(starts[tail].tolist(), ends[tail].tolist(), strict=True)
        ]
        t_mid, t_off, t_dur, t_num, t_str = upb_events(
            events, meta, builder.want_numeric, builder.strdicts
        )
        mid[tail], offset[tail], duration[tail] = t_mid, t_off, t_dur
        for target, source in ((ev_num, t_num), (ev_str, t_str)):
            for col, (rows, values) in source.items():
                rows = tail[rows]
                before = target.get(col)
                target[col] = (
                    (rows, values)
                    if before is None
                    else (np.concatenate([before[0], rows]), np.concatenate([before[1], values]))
                )
    return mid, offset, duration, ev_num, ev_str
