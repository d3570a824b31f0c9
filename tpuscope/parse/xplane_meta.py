"""Per-plane metadata and stat resolution for the XSpace reader.

Stat lookup follows xprof's XEventVisitor: an event's own stat wins, else the stat
on its XEventMetadata (TPU "XLA Ops" carry program_id, flops and bytes_accessed only
on the metadata; jax.profiler.ProfileData misses them for that reason); the first
occurrence of a duplicated stat wins; `ref_value` stats resolve through
stat_metadata. hlo_module is derived from program_id via the "name(program_id)"
metadata names of /host:metadata and "XLA Modules" events; ops on "XLA Ops" lines
without an hlo_op stat take the metadata display_name (TPU: "fusion.3", while the
event name is the whole HLO instruction text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tpuscope.parse.xplane_proto import U64_MASK, stat_value, text

OP_LINES = ("XLA Ops", "Async XLA Ops")
MODULE_LINE = "XLA Modules"
METADATA_PLANE = "/host:metadata"
_MODULE_NAME = re.compile(r"^(.*)\((-?\d+)\)$")

NumCols = dict[
    str, tuple[np.ndarray, np.ndarray]
]  # column -> (values, valid mask) or (rows, values)
StrCols = dict[str, np.ndarray]  # column -> int32 dictionary codes (-1: null)


class StringDict:
    """Incremental string dictionary: str -> int32 code, shared by every chunk of a column."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: str) -> int:
        found = self.codes.get(value)
        if found is None:
            found = self.codes[value] = len(self.values)
            self.values.append(value)
        return found


def as_string(kind: str | None, value: Any) -> str | None:
    """A stat value for a string column: numbers are written out (a graph hash can be either)."""
    if kind == "str":
        return value
    if kind == "num":
        return format(value, "g") if isinstance(value, float) else str(value)
    return None


def number_arrays(values: Sequence[Any], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Python numbers (None: missing) -> (array, valid mask); ints wrap to the dtype's 64 bits."""
    out = np.zeros(len(values), dtype=dtype)
    valid = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        if value is None:
            continue
        valid[i] = True
        if isinstance(value, float):
            out[i] = np.array(value).astype(dtype)
        else:
            value = int(value)
            out[i] = (
                (value & U64_MASK)
                if dtype == np.uint64
                else (value - (1 << 64) if value >= (1 << 63) else value)
            )
    return out, valid


def _plane_stat(stat: Any, names: dict[int, str]) -> Any:
    kind, value = stat_value(stat, names)
    if kind == "str" and stat.WhichOneof("value") == "bytes_value":
        return None  # binary payloads (core_details, HLO protos) are not plane facts worth keeping
    return value


class PlaneMeta:
    """Metadata of one plane, decoded with upb from the plane without its lines."""

    def __init__(
        self,
        plane: Any,
        names: StringDict,
        strdicts: dict[str, StringDict],
        want_numeric: dict[str, Any],
        want_string: Sequence[str],
    ) -> None:
        self.name = text(plane.name)
        self.stat_names = {k: text(v.name) for k, v in plane.stat_metadata.items()}
        stats = (
            (
                self.stat_names.get(s.metadata_id, str(s.metadata_id)),
                _plane_stat(s, self.stat_names),
            )
            for s in plane.stats
        )
        self.stats = {name: value for name, value in stats if value is not None}
        self.want = {
            sid: name
            for sid, name in self.stat_names.items()
            if name in want_numeric or name in want_string
        }
        metadata = plane.event_metadata
        ids = np.fromiter(metadata.keys(), dtype=np.int64, count=len(metadata))
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        values = list(metadata.values())
        self._read_metadata([values[i] for i in order], names, strdicts, want_numeric, want_string)
        self.display_codes: np.ndarray | None = None
        self.module_by_pid = (
            dict(self.module_of_meta.values()) if self.name == METADATA_PLANE else {}
        )

    def _read_metadata(
        self,
        metas: list[Any],
        names: StringDict,
        strdicts: dict[str, StringDict],
        want_numeric: dict[str, Any],
        want_string: Sequence[str],
    ) -> None:
        n = len(metas)
        self.name_code = np.empty(n + 1, dtype=np.int32)  # the extra slot: unknown metadata id
        self.display = [""] * n
        self.module_of_meta: dict[int, tuple[int, str]] = {}  # row -> (program_id, module)
        nums: dict[str, list[Any]] = {c: [None] * (n + 1) for c in want_numeric}
        strs: dict[str, list[Any]] = {c: [None] * (n + 1) for c in want_string}
        for i, meta in enumerate(metas):
            name = text(meta.name)
            self.name_code[i] = names.code(name)
            self.display[i] = text(meta.display_name) if meta.display_name else name
            match = _MODULE_NAME.match(name)
            if match:
                self.module_of_meta[i] = (int(match[2]) & U64_MASK, match[1])
            for stat in meta.stats:
                col = self.want.get(stat.metadata_id)
                if col is None:
                    continue
                kind, value = stat_value(stat, self.stat_names)
                if col in nums and kind == "num" and nums[col][i] is None:
                    nums[col][i] = value
                elif col in strs and strs[col][i] is None:
                    strs[col][i] = as_string(kind, value)
        self.name_code[n] = names.code("")
        self.meta_num = {
            c: number_arrays(v, want_numeric[c])
            for c, v in nums.items()
            if any(x is not None for x in v)
        }
        self.meta_str = {
            c: np.array([-1 if x is None else strdicts[c].code(x) for x in v], dtype=np.int32)
            for c, v in strs.items()
            if any(x is not None for x in v)
        }

    def lookup(self, mids: np.ndarray) -> np.ndarray:
        """Metadata ids -> row in the per-metadata arrays (len(ids): unknown id)."""
        n = len(self.ids)
        if n == 0:
            return np.zeros(len(mids), dtype=np.int64)
        j = np.searchsorted(self.ids, mids)
        jc = np.minimum(j, n - 1)
        return np.where(self.ids[jc] == mids, jc, n)


def upb_events(
    events: Sequence[Any],
    meta: PlaneMeta,
    want_numeric: dict[str, Any],
    strdicts: dict[str, StringDict],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, NumCols, NumCols]:
    """Columns of upb XEvent messages: metadata_id, offset_ps, duration_ps, and the wanted
    event-level stats as {column: (event rows, values or dictionary codes)}."""
    n = len(events)
    arr = np.array(
        [(e.metadata_id, e.offset_ps, e.duration_ps) for e in events], dtype=np.int64
    ).reshape(n, 3)
    nums: dict[str, tuple[list[int], list[Any]]] = {}
    strs: dict[str, tuple[list[int], list[int]]] = {}
    for i, event in enumerate(events) if meta.want else ():
        seen: set[str] = set()
        for stat in event.stats:
            col = meta.want.get(stat.metadata_id)
            if col is None or col in seen:
                continue
            kind, value = stat_value(stat, meta.stat_names)
            if col in want_numeric:
                if kind != "num":
                    continue
                rows, vals = nums.setdefault(col, ([], []))
                vals.append(value)
            else:
                value = as_string(kind, value)
                if value is None:
                    continue
                rows, vals = strs.setdefault(col, ([], []))
                vals.append(strdicts[col].code(value))
            rows.append(i)
            seen.add(col)
    ev_num = {
        c: (np.array(r, np.int64), number_arrays(v, want_numeric[c])[0])
        for c, (r, v) in nums.items()
    }
    ev_str = {c: (np.array(r, np.int64), np.array(v, np.int32)) for c, (r, v) in strs.items()}
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), ev_num, ev_str


def wire_stats(
    data: bytes,
    meta: PlaneMeta,
    events: np.ndarray,
    mid: np.ndarray,
    kind: np.ndarray,
    num: np.ndarray,
    str_start: np.ndarray,
    str_len: np.ndarray,
    want_numeric: dict[str, Any],
    strdicts: dict[str, StringDict],
) -> tuple[NumCols, NumCols]:
    """Decoded wire stats -> {column: (event rows, values)}; the first occurrence per event wins."""
    ev_num: NumCols = {}
    ev_str: NumCols = {}
    for sid, col in meta.want.items():
        sel = np.flatnonzero((mid == sid) & (kind != 0))[
            ::-1
        ]  # reversed: the first occurrence is written last
        if sel.size == 0:
            continue
        rows, kinds, bits = events[sel], kind[sel], num[sel]
        if col in want_numeric:
            numeric = np.isin(kinds, (2, 3, 4))
            if numeric.any():
                ev_num[col] = (
                    rows[numeric],
                    _numbers(bits[numeric], kinds[numeric], want_numeric[col]),
                )
            continue
        codes = _string_codes(data, meta, kinds, bits, str_start[sel], str_len[sel], strdicts[col])
        keep = codes >= 0
        ev_str[col] = (rows[keep], codes[keep])
    return ev_num, ev_str


def _numbers(bits: np.ndarray, kinds: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.empty(len(bits), dtype=dtype)
    double = kinds == 2
    out[~double] = bits[~double] if dtype == np.uint64 else bits[~double].view(np.int64)
    if double.any():
        out[double] = bits[double].view(np.float64).astype(dtype)
    return out


def _unique(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_inverse=True) for stat metadata ids: small non-negative ints get a
    presence table (the same sorted uniques, no sort: np.unique was 0.1 s of a 1M-event trace)."""
    if ids.min() < 0 or ids.max() > 1 << 22:
        return np.unique(ids, return_inverse=True)
    present = np.zeros(int(ids.max()) + 1, dtype=bool)
    present[ids] = True
    uniq = np.flatnonzero(present)
    slot = np.empty(len(present), dtype=np.intp)
    slot[uniq] = np.arange(len(uniq))
    return uniq, slot[ids]


def _string_codes(
    data: bytes,
    meta: PlaneMeta,
    kinds: np.ndarray,
    bits: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    strings: StringDict,
) -> np.ndarray:
    codes = np.full(len(kinds), -1, dtype=np.int32)
    ref = kinds == 7
    if ref.any():
        uniq, inverse = _unique(bits[ref].view(np.int64))
        codes[ref] = np.array(
            [strings.code(meta.stat_names.get(int(u), "")) for u in uniq], np.int32
        )[inverse]
    literal = (kinds == 5) | (kinds == 6)
    if literal.any():
        cache: dict[bytes, int] = {}
        out = []
        for start, length in zip(starts[literal].tolist(), lengths[literal].tolist(), strict=True):
            raw = data[start : start + length]
            code = cache.get(raw)
            if code is None:
                code = cache[raw] = strings.code(text(raw))
            out.append(code)
        codes[literal] = np.array(out, dtype=np.int32)
    numeric = (kinds == 3) | (kinds == 4)
    if numeric.any():
        signed = (kinds[numeric] == 4).tolist()
        codes[numeric] = [
            strings.code(str(v - (1 << 64) if s and v >= (1 << 63) else v))
            for v, s in zip(bits[numeric].tolist(), signed, strict=True)
        ]
    return codes


def merge_stats(
    meta: PlaneMeta,
    rows: np.ndarray,
    ev_num: NumCols,
    ev_str: NumCols,
    want_numeric: dict[str, Any],
    want_string: Sequence[str],
    line_name: str,
    strdicts: dict[str, StringDict],
    module_sink: dict[int, str],
) -> tuple[NumCols, StrCols]:
    """Event-level stats (they win) over metadata-level stats gathered by metadata row."""
    n = len(rows)
    num_cols: NumCols = {}
    str_cols: StrCols = {}
    for col, dtype in want_numeric.items():
        event, on_meta = ev_num.get(col), meta.meta_num.get(col)
        if event is None and on_meta is None:
            continue
        if on_meta is not None:
            values, valid = on_meta[0][rows], on_meta[1][rows]
        else:
            values, valid = np.zeros(n, dtype=dtype), np.zeros(n, dtype=bool)
        if event is not None:
            values[event[0]], valid[event[0]] = event[1], True
        num_cols[col] = (values, valid)
    for col in want_string:
        event, on_meta_codes = ev_str.get(col), meta.meta_str.get(col)
        if event is None and on_meta_codes is None:
            continue
        codes = on_meta_codes[rows] if on_meta_codes is not None else np.full(n, -1, dtype=np.int32)
        if event is not None:
            codes[event[0]] = event[1]
        str_cols[col] = codes
    if line_name == MODULE_LINE and meta.module_of_meta:
        _module_events(
            meta, rows, num_cols, str_cols, want_numeric, want_string, strdicts, module_sink
        )
    if "hlo_op" in want_string and line_name in OP_LINES:
        codes = str_cols.get("hlo_op", np.full(n, -1, dtype=np.int32))
        missing = codes < 0
        if missing.any():
            if meta.display_codes is None:
                strings = strdicts["hlo_op"]
                meta.display_codes = np.array(
                    [strings.code(s) for s in meta.display] + [-1], dtype=np.int32
                )
            codes[missing] = meta.display_codes[rows[missing]]
            str_cols["hlo_op"] = codes
    return num_cols, str_cols


def _module_events(
    meta: PlaneMeta,
    rows: np.ndarray,
    num_cols: NumCols,
    str_cols: StrCols,
    want_numeric: dict[str, Any],
    want_string: Sequence[str],
    strdicts: dict[str, StringDict],
    module_sink: dict[int, str],
) -> None:
    """Events named "module(program_id)" on an XLA Modules line get both as stats."""
    n = len(rows)
    known = np.array(sorted(meta.module_of_meta), dtype=np.int64)
    at = np.searchsorted(known, rows)
    hit = np.flatnonzero((at < len(known)) & (known[np.minimum(at, len(known) - 1)] == rows))
    if not hit.size:
        return
    metas = rows[hit].tolist()
    if "program_id" in want_numeric:
        pids = np.array([meta.module_of_meta[m][0] for m in metas], dtype=np.uint64)
        values, valid = num_cols.get("program_id", (np.zeros(n, np.uint64), np.zeros(n, bool)))
        values = values.astype(np.uint64, copy=False)
        fill = ~valid[hit]
        values[hit[fill]], valid[hit[fill]] = pids[fill], True
        num_cols["program_id"] = (values, valid)
    if "hlo_module" in want_string:
        strings = strdicts["hlo_module"]
        codes = str_cols.get("hlo_module", np.full(n, -1, dtype=np.int32))
        names = np.array([strings.code(meta.module_of_meta[m][1]) for m in metas], dtype=np.int32)
        fill = codes[hit] < 0
        codes[hit[fill]] = names[fill]
        str_cols["hlo_module"] = codes
    for m in set(metas):
        pid, module = meta.module_of_meta[m]
        module_sink[pid] = module
