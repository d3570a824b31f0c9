"""Assembles the XSpace reader's per-line numpy columns into one pyarrow Table.

Memory is the point here: sparse stat columns stay as (rows, values) until the
end, dictionary columns use the smallest index type and ONE shared dictionary per
column (chunks with different dictionaries break group_by), and batches are popped
as they become RecordBatches, so there is no concatenation copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tpuscope.parse.xplane_meta import NumCols, StrCols, StringDict

COLUMN_ORDER = (
    "hlo_op",
    "hlo_module",
    "program_id",
    "flops",
    "bytes_accessed",
    "hlo_category",
    "graph_hash",
    "step_num",
    "source",
    "tf_op",
)
META_KEY = b"tpuscope.xspace"  # schema metadata: JSON {hostnames, planes: {name: {stat: value}}}

Packed = tuple[Any, ...]


def _pack(values: np.ndarray, valid: np.ndarray) -> Packed:
    """(values, valid), or ('sparse', rows, values) when under half the rows are set."""
    count = int(np.count_nonzero(valid))
    if count * 2 >= len(valid):
        return (values, valid)
    rows = np.flatnonzero(valid).astype(np.int32)
    return ("sparse", rows, values[rows])


def _unpack(packed: Packed, n: int, dtype: Any, fill: Any) -> tuple[np.ndarray, np.ndarray]:
    if len(packed) == 3 and isinstance(packed[0], str):
        _, rows, values = packed
        out = np.full(n, fill, dtype=dtype)
        out[rows] = values
        valid = np.zeros(n, dtype=bool)
        valid[rows] = True
        return out, valid
    return packed[0], packed[1]


def _index_type(strings: StringDict) -> Any:
    size = len(strings.values)
    return np.int8 if size <= 127 else np.int16 if size <= 32767 else np.int32


class TableBuilder:
    """Collects line batches, then builds the table (see the module docstring)."""

    def __init__(
        self, want_numeric: dict[str, Any], want_string: Sequence[str], always: Sequence[str]
    ) -> None:
        self.names, self.planes, self.lines = StringDict(), StringDict(), StringDict()
        self.strdicts = {c: StringDict() for c in want_string}
        self.want_numeric, self.want_string, self.always = (
            want_numeric,
            tuple(want_string),
            tuple(always),
        )
        self.batches: list[tuple[Any, ...]] = []
        self.module_by_pid: dict[int, str] = {}
        self.plane_stats: dict[str, dict[str, Any]] = {}
        self.hostnames: list[str] = []

    def add(
        self,
        plane: int,
        line: int,
        names: np.ndarray,
        start_ns: np.ndarray,
        dur_ns: np.ndarray,
        num_cols: NumCols,
        str_cols: StrCols,
    ) -> None:
        if len(start_ns):
            self.batches.append(
                (
                    plane,
                    line,
                    names,
                    start_ns,
                    dur_ns,
                    {c: _pack(v, ok) for c, (v, ok) in num_cols.items()},
                    {c: _pack(codes, codes >= 0) for c, codes in str_cols.items()},
                )
            )

    def _module_lookup(self) -> tuple[np.ndarray, np.ndarray] | None:
        if not (
            "hlo_module" in self.want_string
            and "program_id" in self.want_numeric
            and self.module_by_pid
        ):
            return None
        strings = self.strdicts["hlo_module"]
        pids = np.fromiter(
            self.module_by_pid.keys(), dtype=np.uint64, count=len(self.module_by_pid)
        )
        codes = np.array([strings.code(m) for m in self.module_by_pid.values()], dtype=np.int32)
        order = np.argsort(pids)
        return pids[order], codes[order]

    def _schema(self, modules: Any) -> tuple[pa.Schema, list[str], dict[str, Any]]:
        present_num = [
            c for c in self.want_numeric if c in self.always or any(c in b[5] for b in self.batches)
        ]
        present_str = [
            c
            for c in self.want_string
            if c in self.always
            or any(c in b[6] for b in self.batches)
            or (c == "hlo_module" and modules is not None and "program_id" in present_num)
        ]
        dicts = {
            "plane": self.planes,
            "line": self.lines,
            "name": self.names,
            **{c: self.strdicts[c] for c in present_str},
        }
        index_types = {c: _index_type(d) for c, d in dicts.items()}

        def arrow_type(col: str) -> Any:
            if col in index_types:
                return pa.dictionary(pa.from_numpy_dtype(index_types[col]), pa.string())
            return pa.from_numpy_dtype(self.want_numeric[col])

        stats = [c for c in COLUMN_ORDER if c in present_num or c in present_str]
        stats += [c for c in present_str + present_num if c not in stats]
        fields = [pa.field(c, arrow_type(c)) for c in ("plane", "line", "name")]
        fields += [pa.field("start_ns", pa.int64()), pa.field("dur_ns", pa.int64())]
        fields += [pa.field(c, arrow_type(c)) for c in stats]
        meta = json.dumps({"hostnames": self.hostnames, "planes": self.plane_stats}, default=str)
        return pa.schema(fields, metadata={META_KEY: meta}), stats, index_types

    def table(self) -> pa.Table:
        modules = self._module_lookup()
        schema, stats, index_types = self._schema(modules)
        dictionaries = {
            "plane": self.planes,
            "line": self.lines,
            "name": self.names,
            **self.strdicts,
        }
        values = {c: pa.array(dictionaries[c].values, type=pa.string()) for c in index_types}

        def dict_array(col: str, codes: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
            return pa.DictionaryArray.from_arrays(
                pa.array(codes.astype(index_types[col], copy=False), mask=mask), values[col]
            )

        record_batches = []
        batches, self.batches = self.batches, []
        batches.reverse()
        while batches:  # popped one by one so their numpy inputs are freed as we go
            plane, line, names, start, dur, nums, strs = batches.pop()
            n = len(start)
            num_cols = {c: _unpack(v, n, self.want_numeric[c], 0) for c, v in nums.items()}
            str_cols = {c: _unpack(v, n, np.int32, -1)[0] for c, v in strs.items()}
            if modules is not None and "program_id" in num_cols:
                _fill_modules(num_cols["program_id"], str_cols, modules, n)
            arrays = [
                dict_array("plane", np.full(n, plane)),
                dict_array("line", np.full(n, line)),
                dict_array("name", names),
                pa.array(start),
                pa.array(dur),
            ]
            for col in stats:
                if col in index_types:
                    arrays.append(
                        self._string_column(
                            col, str_cols.get(col), n, index_types, values, dict_array
                        )
                    )
                else:
                    arrays.append(_number_column(num_cols.get(col), n, self.want_numeric[col]))
            record_batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
            del arrays, names, start, dur, num_cols, str_cols
        return pa.Table.from_batches(record_batches, schema=schema)

    @staticmethod
    def _string_column(
        col: str,
        codes: np.ndarray | None,
        n: int,
        index_types: dict[str, Any],
        values: Mapping[str, pa.Array],
        dict_array: Any,
    ) -> pa.Array:
        if codes is None:  # all null, but with the shared dictionary
            return pa.DictionaryArray.from_arrays(
                pa.nulls(n, pa.from_numpy_dtype(index_types[col])),  # type: ignore[call-overload]  # its stubs type each concrete DataType, not DataType
                values[col],
            )
        null = codes < 0
        return dict_array(col, codes, null if null.any() else None)


def _number_column(packed: tuple[np.ndarray, np.ndarray] | None, n: int, dtype: Any) -> pa.Array:
    arrow_type = pa.from_numpy_dtype(dtype)
    if packed is None:
        return pa.nulls(n, arrow_type)  # type: ignore[call-overload]  # as above
    values, valid = packed
    return pa.array(values, type=arrow_type, mask=None if valid.all() else ~valid)


def _fill_modules(
    program: tuple[np.ndarray, np.ndarray],
    str_cols: StrCols,
    modules: tuple[np.ndarray, np.ndarray],
    n: int,
) -> None:
    """hlo_module from program_id where an event has the id but no module name."""
    pids, codes = modules
    values, valid = program
    current = str_cols.get("hlo_module")
    if current is None:
        current = np.full(n, -1, dtype=np.int32)
    need = np.flatnonzero(valid & (current < 0))
    if need.size:
        at = np.searchsorted(pids, values[need])
        at_c = np.minimum(at, len(pids) - 1)
        hit = pids[at_c] == values[need]
        current[need[hit]] = codes[at_c[hit]]
        str_cols["hlo_module"] = current
