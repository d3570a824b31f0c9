"""Table schemas of the run store, and the Finding record the detectors return.

Every layer agrees on these shapes, so they live in one place. Times are int64
nanoseconds; repeated strings are dictionary-encoded so a million-row table of op
names stays small. Bump SCHEMA_VERSION when a column changes meaning or type
(documented in docs/store.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

SCHEMA_VERSION = 1

_dict_str = pa.dictionary(pa.int32(), pa.string())

# Columns that say which process wrote a row: many ranks can write one run.
PROCESS_FIELDS = [
    pa.field("host", _dict_str),
    pa.field("pid", pa.int32()),
    pa.field("rank", pa.int32()),
]

TABLES: dict[str, pa.Schema] = {
    # One row per step: the interval that ends at a step boundary (sync/mark_step/...).
    "steps": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("start_ns", pa.int64()),
            pa.field("end_ns", pa.int64()),
            pa.field("wall_ns", pa.int64()),
            pa.field("boundary", _dict_str),
            pa.field("compiles", pa.int64()),
            pa.field("compile_ns", pa.int64()),
            pa.field("executions", pa.int64()),
            pa.field("execute_ns", pa.int64()),
            pa.field("fallback_ops", pa.int64()),
            pa.field("transfers_from_device", pa.int64()),
            pa.field("graph_hashes", pa.list_(pa.string())),
        ]
    ),
    # Per-step delta of every torch_xla counter and metric (long format).
    # kind=counter: count is the counter's delta, total is 0.
    # kind=metric: count is the number of new samples, total the accumulator delta
    # (ns for *Time metrics, bytes for size metrics, plain units otherwise).
    "metrics": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("name", _dict_str),
            pa.field("kind", _dict_str),
            pa.field("count", pa.int64()),
            pa.field("total", pa.float64()),
        ]
    ),
    # One row per XLA compile.
    "compiles": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("index", pa.int64()),
            pa.field("time_ns", pa.int64()),
            pa.field("duration_ns", pa.int64()),
            pa.field("graph_hash", pa.string()),
            pa.field("cause", pa.string()),
            pa.field("location", pa.string()),
            pa.field("frames", pa.list_(pa.string())),
            pa.field("num_inputs", pa.int64()),
            pa.field("num_outputs", pa.int64()),
            pa.field("input_shapes", pa.list_(pa.string())),
            pa.field("input_gb", pa.float64()),
            pa.field("output_gb", pa.float64()),
            pa.field("aliased_gb", pa.float64()),
            pa.field("intermediate_gb", pa.float64()),
            pa.field("program_gb", pa.float64()),
        ]
    ),
    # One row per (step, aten op that ran on the host instead of the device).
    "fallbacks": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("op", _dict_str),
            pa.field("count", pa.int64()),
            pa.field("location", pa.string()),
        ]
    ),
    "findings": pa.schema(
        [
            pa.field("rule", _dict_str),
            pa.field("severity", _dict_str),
            pa.field("title", pa.string()),
            pa.field("detail", pa.string()),
            pa.field("fix", pa.string()),
            pa.field("location", pa.string()),
            pa.field("cost_s", pa.float64()),
            pa.field("steps", pa.list_(pa.int64())),
            pa.field("evidence", pa.string()),
        ]
    ),
}

SEVERITIES = ("high", "medium", "low")


@dataclass
class Finding:
    """One diagnosis: what is wrong, where, what it costs and the change that fixes it."""

    rule: str
    severity: str
    title: str
    detail: str
    fix: str
    location: str | None = None
    cost_s: float = 0.0
    steps: list[int] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["evidence"] = json.dumps(self.evidence, default=str, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Finding:
        data = dict(row)
        data["evidence"] = json.loads(data.get("evidence") or "{}")
        data["steps"] = [int(s) for s in (data.get("steps") if data.get("steps") is not None else [])]
        cost = data.get("cost_s")
        data["cost_s"] = 0.0 if cost is None or cost != cost else float(cost)
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
