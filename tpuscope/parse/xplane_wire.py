"""Vectorised protobuf wire decoding of XLine events with numpy: no Python work per event.

Two steps per line:
1. Framing. Every `events` entry is a 0x22 tag byte, a length varint and the payload.
   Each 0x22 byte of a window is a candidate; its "next" candidate is computed in
   numpy, and the chain reachable from the first event is found by pointer doubling
   (log2(n) passes). 0x22 bytes inside payloads form chains that are never reached.
2. Lockstep decoding: field k of every event at once (tag, varint value or LEN span),
   until every event is consumed. Only stats whose metadata id is wanted are kept
   (their first byte is peeked), then decoded the same way.

Every framing, every event field and every wanted stat is validated: corrupt bytes
raise WireError with the offset. Unwanted stat payloads are skipped unparsed.
"""

from __future__ import annotations

import numpy as np

from tpuscope.parse.xplane_proto import WireError

EVENT_WINDOW = (
    1 << 20
)  # bytes of a line examined per pointer-doubling pass (bounds temporary memory)
_EVENT_TAG = 0x22  # XLine.events: field 4, wire type 2
_LOOKUP_LIMIT = 1 << 22
_VALID_WIRE = np.isin(np.arange(8), (0, 1, 2, 5))  # a lookup table: np.isin sorts at every call


def np_varint(buf: np.ndarray, pos: np.ndarray, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Varints at positions `pos` -> (uint64 values, byte lengths)."""
    first = buf[np.minimum(pos, end - 1)]
    value = (first & 0x7F).astype(np.uint64)
    length = np.ones(len(pos), dtype=np.int64)
    more = np.flatnonzero(first >= 0x80)
    k = 1
    while more.size:
        if k >= 10:
            raise WireError("varint longer than 10 bytes")
        at = pos[more] + k
        if (at >= end).any():
            raise WireError("truncated varint")
        byte = buf[at]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        length[more] += 1
        more = more[byte >= 0x80]
        k += 1
    if (pos + length > end).any():
        raise WireError("truncated varint")
    return value, length


def event_spans(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Frame the run of XLine.events entries that begins at `start` (a 0x22 tag).

    Returns (payload starts, payload ends, position after the run), absolute offsets.
    """
    starts, ends = [], []
    pos = start
    while True:
        window_end = min(end, pos + EVENT_WINDOW)
        payload_start, payload_end, nxt = _chain_window(buf, pos, window_end, end)
        starts.append(payload_start)
        ends.append(payload_end)
        if nxt > end:
            raise WireError(
                f"event at byte {int(payload_start[-1])} runs past the end of its line (byte {end})"
            )
        if window_end <= nxt < end and buf[nxt] == _EVENT_TAG:
            pos = nxt  # the chain continues in the next window
            continue
        return np.concatenate(starts), np.concatenate(ends), nxt


def _lenient_lengths(
    seg: np.ndarray, after_tag: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Length varint after each candidate tag; garbage candidates get a value that leads nowhere."""
    length = np.zeros(len(after_tag), np.uint64)
    size = np.ones(len(after_tag), np.int64)
    inside = np.flatnonzero(after_tag < n)
    byte = seg[after_tag[inside]]
    length[inside] = byte & 0x7F
    size[after_tag >= n] = n + 1
    more = inside[byte >= 0x80]
    k = 1
    while more.size and k < 10:
        at = after_tag[more] + k
        ok = at < n
        size[more[~ok]] = n + 1
        more, at = more[ok], at[ok]
        byte = seg[at]
        length[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        size[more] += 1
        more = more[byte >= 0x80]
        k += 1
    return length, size


def _chain_window(
    buf: np.ndarray, pos: int, window_end: int, end: int
) -> tuple[np.ndarray, np.ndarray, int]:
    seg = buf[pos:end]
    n = end - pos
    cand = np.flatnonzero(seg[: window_end - pos] == _EVENT_TAG)  # cand[0] == 0: the tag at pos
    count = len(cand)
    after_tag = cand + 1
    length, size = _lenient_lengths(seg, after_tag, n)
    nxt = after_tag + size + np.minimum(length, np.uint64(n + 1)).astype(np.int64)
    del length
    j = np.searchsorted(cand, nxt)
    jc = np.minimum(j, count - 1)
    succ = np.append(np.where((j < count) & (cand[jc] == nxt), j, count), count)
    del j, jc
    reached = np.zeros(1, np.int64)
    while True:  # reached = nodes at distance 0 .. 2^k-1 from node 0; succ = 2^k-step successor
        new = succ[reached]
        new = new[new != count]
        if new.size == 0:
            break
        reached = np.concatenate([reached, new])
        succ = succ[succ]
    del succ
    reached.sort()
    return pos + after_tag[reached] + size[reached], pos + nxt[reached], pos + int(nxt[reached[-1]])


def _check_tags(tag: np.ndarray, what: str, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(field numbers, wire types) of the tags; WireError naming the first bad one's message."""
    field_no, wire_type = tag >> 3, tag & 7
    bad = ~_VALID_WIRE[wire_type] | (field_no == 0) | (field_no > 0x1FFFFFFF)
    if bad.any():
        first = np.flatnonzero(bad)[0]
        raise WireError(
            f"invalid tag {int(tag[first])} inside {what} starting at byte {int(starts[first])}"
        )
    return field_no, wire_type


def _decode_tags(buf: np.ndarray, pos: np.ndarray, end: int) -> tuple[np.ndarray, np.ndarray]:
    """(tags, positions after them); single-byte tags, the common case, skip the varint decoder."""
    tag = buf[pos].astype(np.int64)
    if (tag >= 0x80).any():
        value, size = np_varint(buf, pos, end)
        return value.astype(np.int64), pos + size
    return tag, pos + 1


def lockstep_events(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    end: int,
    want_ids: np.ndarray,
    tail: int = 64,
) -> tuple[np.ndarray, ...]:
    """Decode XEvent payloads [starts, ends) together.

    Returns metadata_id, offset_ps, duration_ps (int64), the wanted stats as
    (event index, stat start, stat end), and the events left for upb: after 4 rounds,
    when at most `tail` events still have fields (a few events with many stats),
    per-round numpy overhead would exceed upb's cost.
    """
    n = len(starts)
    cols = {1: np.zeros(n, np.int64), 2: np.zeros(n, np.int64), 3: np.zeros(n, np.int64)}
    stat_event, stat_start, stat_end = [], [], []
    pos = starts.copy()
    active = np.flatnonzero(pos < ends)
    rounds = 0
    while active.size:
        rounds += 1
        if rounds > 4 and active.size <= tail:
            break
        tag, at = _decode_tags(buf, pos[active], end)
        field_no, wire_type = _check_tags(tag, "event", starts[active])
        new = np.empty_like(at)
        is_varint = wire_type == 0
        if is_varint.any():
            value, size = np_varint(buf, at[is_varint], end)
            value = value.view(np.int64)
            rows, numbers = active[is_varint], field_no[is_varint]
            for number, col in cols.items():
                sel = numbers == number
                col[rows[sel]] = value[sel]
            new[is_varint] = at[is_varint] + size
        is_len = wire_type == 2
        if is_len.any():
            length, size = np_varint(buf, at[is_len], end)
            payload = at[is_len] + size
            after = payload + length.astype(np.int64)
            new[is_len] = after
            sel = field_no[is_len] == 4
            if sel.any():
                kept = _wanted_stats(buf, payload[sel], after[sel], end, want_ids)
                stat_event.append(active[is_len][sel][kept])
                stat_start.append(payload[sel][kept])
                stat_end.append(after[sel][kept])
        new[wire_type == 1] = at[wire_type == 1] + 8
        new[wire_type == 5] = at[wire_type == 5] + 4
        over = new > ends[active]
        if over.any():
            raise WireError(
                f"field overruns event starting at byte {int(starts[active[np.flatnonzero(over)[0]]])}"
            )
        pos[active] = new
        active = active[new < ends[active]]
    ev, ss, se = (
        np.concatenate(x) if x else np.empty(0, np.int64)
        for x in (stat_event, stat_start, stat_end)
    )
    if active.size:
        keep = ~np.isin(ev, active)
        ev, ss, se = ev[keep], ss[keep], se[keep]
    return cols[1], cols[2], cols[3], ev, ss, se, active


def _wanted_stats(
    buf: np.ndarray, start: np.ndarray, stop: np.ndarray, end: int, want_ids: np.ndarray
) -> np.ndarray:
    """Mask of the stats worth decoding: a canonical XStat starts with tag 0x08 (metadata_id),
    so peek it; non-canonical stats are all kept (decoded and filtered later)."""
    if not want_ids.size:
        return np.zeros(len(start), dtype=bool)
    canonical = (buf[np.minimum(start, end - 1)] == 0x08) & (start < stop)
    keep = ~canonical
    if canonical.any():
        ids, _ = np_varint(buf, start[canonical] + 1, end)
        keep[canonical] = member(ids, want_ids)
    return keep


def member(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """np.isin for small non-negative ids (metadata ids, codes): a boolean lookup table, no sort."""
    wanted = wanted[wanted >= 0]
    if not wanted.size:
        return np.zeros(len(values), dtype=bool)
    if wanted.max() > _LOOKUP_LIMIT:  # ids a table cannot hold: the sorting kind
        return np.isin(values.astype(np.int64, copy=False), wanted)
    table = np.zeros(int(wanted.max()) + 2, dtype=bool)
    table[wanted] = True
    return table[np.minimum(values, len(table) - 1).astype(np.intp, copy=False)]


def lockstep_stats(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, end: int
) -> tuple[np.ndarray, ...]:
    """Decode XStat payloads -> metadata_id, kind (field number of the value),
    numeric value bits (uint64), and string value spans (start, length)."""
    n = len(starts)
    mid, kind = np.zeros(n, np.int64), np.zeros(n, np.int8)
    num = np.zeros(n, np.uint64)
    str_start, str_len = np.zeros(n, np.int64), np.zeros(n, np.int64)
    pos = starts.copy()
    active = np.flatnonzero(pos < ends)
    while active.size:
        value, size = np_varint(buf, pos[active], end)
        tag = value.astype(np.int64)
        at = pos[active] + size
        field_no, wire_type = _check_tags(tag, "stat", starts[active])
        new = np.empty_like(at)
        is_varint = wire_type == 0
        if is_varint.any():
            value, size = np_varint(buf, at[is_varint], end)
            rows, numbers = active[is_varint], field_no[is_varint]
            mid[rows[numbers == 1]] = value[numbers == 1].view(np.int64)
            sel = (numbers == 3) | (numbers == 4) | (numbers == 7)  # uint64, int64, ref
            num[rows[sel]], kind[rows[sel]] = value[sel], numbers[sel]
            new[is_varint] = at[is_varint] + size
        is_fixed64 = wire_type == 1
        if is_fixed64.any():
            rows, at64 = active[is_fixed64], at[is_fixed64]
            sel = field_no[is_fixed64] == 2  # double
            if sel.any():
                raw = np.stack([buf[at64[sel] + k] for k in range(8)], axis=1).copy()
                num[rows[sel]], kind[rows[sel]] = raw.view("<u8").ravel(), 2
            new[is_fixed64] = at64 + 8
        is_len = wire_type == 2
        if is_len.any():
            length, size = np_varint(buf, at[is_len], end)
            payload = at[is_len] + size
            rows, numbers = active[is_len], field_no[is_len]
            sel = (numbers == 5) | (numbers == 6)  # str, bytes
            str_start[rows[sel]], str_len[rows[sel]] = payload[sel], length[sel].astype(np.int64)
            kind[rows[sel]] = numbers[sel]
            new[is_len] = payload + length.astype(np.int64)
        new[wire_type == 5] = at[wire_type == 5] + 4
        if (new > ends[active]).any():
            raise WireError("field overruns stat")
        pos[active] = new
        active = active[new < ends[active]]
    return mid, kind, num, str_start, str_len
