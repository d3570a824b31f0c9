"""The XLine event decoder, compiled: xplane_wire's results, one pass over the bytes.

Why: xplane_wire frames a line's events by pointer doubling and decodes them field k of every
event at a time, because numpy cannot follow a byte-serial chain; that costs ~1.1 s of CPU on a
1M-event trace, most of it serial on one thread (docs/benchmarks.md). A compiled loop walks the
same bytes once. The functions below are its source: numba compiles them ahead of time
(`xplane_build`, numba.pycc, in a process of its own, once per install) into an extension
module that needs only numpy, so a reading process loads it in milliseconds and never imports
numba; numba is an optional build tool (the `xprof` extra), not a C extension the project ships.

Each function returns exactly what its xplane_wire counterpart returns (the same arrays, the
same order: stats in xplane_wire's round-major order, the same events left for upb), so the
table is byte for byte the same. Anything unusual (corrupt or non-canonical bytes, ids too big
for a lookup table) makes it return None, and the caller runs xplane_wire, which raises the
same error with the same message as before. Without the module (numba absent, no writable
folder, no C compiler, TPUSCOPE_XPLANE_JIT=0) the numpy decoder reads.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

_EVENT_TAG = 0x22
_MAX_TABLE = 1 << 22  # as xplane_wire._LOOKUP_LIMIT: larger wanted ids go to xplane_wire


def available() -> bool:
    """The compiled decoder is not switched off (TPUSCOPE_XPLANE_JIT=0)."""
    return os.environ.get("TPUSCOPE_XPLANE_JIT", "1") != "0"


_compiled: ModuleType | None = None


def loaded() -> bool:
    return _compiled is not None


def use(module: ModuleType | None) -> bool:
    """Decode with `module` (the compiled one, xplane_build.load finds it) once it passes a
    self-test; False for None or a module that fails it (the numpy decoder reads)."""
    global _compiled
    if module is None:
        return False
    buf = np.frombuffer(bytes([_EVENT_TAG, 0]), np.uint8)  # read-only, as the file's bytes
    spans = _event_spans(module, buf, 0, 2)
    if spans is not None and _decode_batch(module, buf, *spans[:2], np.ones(2, np.bool_), 64):
        _compiled = module  # only a module that passed: another thread may read it at once
    return _compiled is not None


def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[np.uint64, int]:
    """(value, position after) of the varint at pos, bounded by end; position -1 when longer
    than 10 bytes or cut by end (xplane_wire.np_varint's WireError cases)."""
    if pos < end and buf[pos] < 0x80:  # one byte: most tags, ids and lengths
        return np.uint64(buf[pos]), pos + 1
    value = np.uint64(0)
    for k in range(10):
        if pos + k >= end:
            return np.uint64(0), -1
        byte = buf[pos + k]
        value |= np.uint64(byte & 0x7F) << np.uint64(7 * k)
        if byte < 0x80:
            return value, pos + k + 1
    return np.uint64(0), -1


def _frame(buf: np.ndarray, start: int, end: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """Walk the run of 0x22-tagged events from start; fill starts/ends when they are long enough.
    Returns the count, or -1 when an event's length is cut or runs past the line's end."""
    pos, n = start, 0
    while pos < end and buf[pos] == _EVENT_TAG:
        length, after = _varint(buf, pos + 1, end)
        if after < 0 or length > np.uint64(end - after):
            return -1
        if n < len(starts):
            starts[n], ends[n] = after, after + np.int64(length)
        pos = after + np.int64(length)
        n += 1
    return n


def _events(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    table: np.ndarray,
    cols: np.ndarray,
    stats: np.ndarray,
    first: int,
    m: int,
) -> tuple[int, int]:
    """Event fields by xplane_wire.lockstep_events' rules into cols (metadata_id, offset_ps,
    duration_ps, field count; 4 x n), and the kept stats in event order into stats (event,
    start, end, field ordinal; 4 x capacity), from event `first` with `m` stats kept so far.
    Returns (stats kept, next event): the next event is n when done, the event to resume from
    when stats is full (the caller grows it: growing arrays inside this loop made it 3x slower,
    refcounts); stats kept is -1 for anything xplane_wire would raise on or treat oddly."""
    end, room = len(buf), stats.shape[1]
    for i in range(first, len(starts)):
        pos, stop, k, m_event = starts[i], ends[i], 0, m
        while pos < stop:
            k += 1
            tag, at = _varint(buf, pos, end)
            field, wire = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
            if at < 0 or field == 0 or field > 0x1FFFFFFF:
                return -1, i
            if wire == 0:
                value, new = _varint(buf, at, end)
                if new < 0:
                    return -1, i
                if 1 <= field <= 3:
                    cols[field - 1, i] = np.int64(value)
            elif wire == 2:
                length, payload = _varint(buf, at, end)
                if payload < 0 or payload > stop or length > np.uint64(stop - payload):
                    return -1, i
                new = payload + np.int64(length)
                if field == 4 and len(table):
                    keep = True
                    if payload < new and buf[payload] == 0x08:  # canonical: peek the id
                        sid, after = _varint(buf, payload + 1, end)
                        if after < 0:
                            return -1, i
                        keep = sid < np.uint64(len(table)) and table[np.int64(sid)]
                    if keep:
                        if m == room:
                            return m_event, i
                        stats[0, m], stats[1, m], stats[2, m], stats[3, m] = i, payload, new, k
                        m += 1
            elif wire == 1:
                new = at + 8
            elif wire == 5:
                new = at + 4
            else:
                return -1, i
            if new > stop:
                return -1, i
            pos = new
        cols[3, i] = k
    return m, len(starts)


def _tail_round(nfields: np.ndarray, tail: int) -> int:
    """The round at which lockstep_events stops and leaves its active events to upb (0: never):
    the first round r > 4 with at most `tail` events that have an r-th field."""
    top = 0
    for v in nfields:
        top = max(top, v)
    count = np.zeros(top + 2, np.int64)
    for v in nfields:
        count[v] += 1
    active = len(nfields) - count[0]  # events with at least r fields, r = 1
    for r in range(1, top + 1):
        if r > 4 and active <= tail:
            return r
        active -= count[r]
    return 0


def _stats(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[Any, ...]:
    """xplane_wire.lockstep_stats, one stat after another; status 1 where it would raise."""
    n, end = len(starts), len(buf)
    mid, kind = np.zeros(n, np.int64), np.zeros(n, np.int8)
    num = np.zeros(n, np.uint64)
    str_start, str_len = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        pos, stop = starts[i], ends[i]
        while pos < stop:
            tag, at = _varint(buf, pos, end)
            if at < 0:
                return 1, mid, kind, num, str_start, str_len
            field, wire = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
            if (
                field == 0
                or field > 0x1FFFFFFF
                or not (wire == 0 or wire == 1 or wire == 2 or wire == 5)
            ):
                return 1, mid, kind, num, str_start, str_len
            if wire == 0:
                value, new = _varint(buf, at, end)
                if new < 0:
                    return 1, mid, kind, num, str_start, str_len
                if field == 1:
                    mid[i] = np.int64(value)
                elif field == 3 or field == 4 or field == 7:
                    num[i], kind[i] = value, field
            elif wire == 1:
                new = at + 8
                if new > end:
                    return 1, mid, kind, num, str_start, str_len
                if field == 2:
                    bits = np.uint64(0)
                    for b in range(8):
                        bits |= np.uint64(buf[at + b]) << np.uint64(8 * b)
                    num[i], kind[i] = bits, 2
            elif wire == 2:
                length, payload = _varint(buf, at, end)
                if payload < 0 or payload > stop or length > np.uint64(stop - payload):
                    return 1, mid, kind, num, str_start, str_len
                new = payload + np.int64(length)
                if field == 5 or field == 6:
                    str_start[i], str_len[i], kind[i] = payload, np.int64(length), field
            else:
                new = at + 4
            if new > stop:
                return 1, mid, kind, num, str_start, str_len
            pos = new
    return 0, mid, kind, num, str_start, str_len


def _decode(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, table: np.ndarray, tail: int
) -> tuple[Any, ...]:
    """A batch: events, then their kept stats in lockstep's order (field ordinal, then event),
    without the events lockstep leaves to upb."""
    n = len(starts)
    cols = np.zeros((4, n), np.int64)
    stats = np.empty((4, 4 * n + 16), np.int64)
    m, first = _events(buf, starts, ends, table, cols, stats, 0, 0)
    while m >= 0 and first < n:  # stats full: twice the room, on from the event that filled it
        bigger = np.empty((4, 2 * stats.shape[1]), np.int64)
        bigger[:, :m] = stats[:, :m]
        stats = bigger
        m, first = _events(buf, starts, ends, table, cols, stats, first, m)
    empty = np.empty(0, np.int64)
    if m < 0:
        return 1, cols[0], cols[1], cols[2], empty, empty, empty, empty
    mid, off, dur, nfields = cols[0], cols[1], cols[2], cols[3]
    s_ev, s_start, s_end, s_ord = stats[0], stats[1], stats[2], stats[3]
    r = _tail_round(nfields, tail)
    left = np.flatnonzero(nfields >= r) if r else empty
    top = 0
    for j in range(m):
        top = max(top, s_ord[j])
    count = np.zeros(top + 2, np.int64)
    kept = 0
    for j in range(m):
        if r == 0 or nfields[s_ev[j]] < r:
            count[s_ord[j] + 1] += 1
            kept += 1
    for k in range(1, top + 2):
        count[k] += count[k - 1]  # count[k]: where the stats of ordinal k begin
    ev, ss, se = np.empty(kept, np.int64), np.empty(kept, np.int64), np.empty(kept, np.int64)
    for j in range(m):  # a stable counting sort by ordinal: events stay in order within one
        if r == 0 or nfields[s_ev[j]] < r:
            at = count[s_ord[j]]
            ev[at], ss[at], se[at] = s_ev[j], s_start[j], s_end[j]
            count[s_ord[j]] += 1
    return 0, mid, off, dur, ev, ss, se, left


def event_spans(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """xplane_wire.event_spans, or None (let it raise or handle the odd case)."""
    assert _compiled is not None, "use() first"
    return _event_spans(_compiled, buf, start, end)


def _event_spans(
    module: ModuleType, buf: np.ndarray, start: int, end: int
) -> tuple[np.ndarray, np.ndarray, int] | None:
    buf, empty = _vector(buf, np.uint8), np.empty(0, np.int64)
    if not 0 <= start <= end <= len(buf):
        raise ValueError(f"event span [{start}, {end}) outside the {len(buf)} bytes")
    count = module.frame(buf, start, end, empty, empty)
    if count <= 0:
        return None
    starts, ends = np.empty(count, np.int64), np.empty(count, np.int64)
    module.frame(buf, start, end, starts, ends)
    return starts, ends, int(ends[-1])


def want_table(want_ids: np.ndarray) -> np.ndarray | None:
    """Lookup table of the wanted stat ids; None when one is too large. Empty when there are no
    ids (no stat is kept); all False when none is >= 0 (non-canonical stats are still kept, as
    xplane_wire._wanted_stats keeps them)."""
    if not want_ids.size:
        return np.zeros(0, dtype=np.bool_)
    wanted = want_ids[want_ids >= 0]
    if not wanted.size:
        return np.zeros(1, dtype=np.bool_)
    if wanted.max() > _MAX_TABLE:
        return None
    table = np.zeros(int(wanted.max()) + 2, dtype=np.bool_)
    table[wanted] = True
    return table


def decode_batch(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, table: np.ndarray, tail: int = 64
) -> tuple[Any, ...] | None:
    """xplane.py's _decode_numbers for one batch: (metadata_id, offset_ps, duration_ps, stat
    events, lockstep_stats' columns or None, events left for upb), or None (use xplane_wire)."""
    assert _compiled is not None, "use() first"
    return _decode_batch(_compiled, buf, starts, ends, table, tail)


def _decode_batch(
    module: ModuleType,
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    table: np.ndarray,
    tail: int,
) -> tuple[Any, ...] | None:
    buf, starts, ends = _vector(buf, np.uint8), _vector(starts, np.int64), _vector(ends, np.int64)
    status, mid, off, dur, ev, ss, se, left = module.decode(
        buf, starts, ends, _vector(table, np.bool_), int(tail)
    )
    if status:
        return None
    if not ev.size:
        return mid, off, dur, ev, None, left
    status, *stats = module.stats(buf, ss, se)
    if status:
        return None
    return mid, off, dur, ev, tuple(stats), left


def _vector(values: np.ndarray, dtype: type) -> np.ndarray:
    """The array as the compiled signatures take it: pycc's wrappers check neither dtype,
    strides nor the number of dimensions (a wrong one is read as raw memory)."""
    vector: np.ndarray = np.ascontiguousarray(values, dtype)
    if vector.ndim != 1:
        raise ValueError(f"a {vector.ndim}-d array where the decoder takes a vector")
    return vector
