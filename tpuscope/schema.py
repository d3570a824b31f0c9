"""Table schemas of the run store, and the Finding record the detectors return.

Every layer agrees on these shapes, so they live in one place. Times are int64
nanoseconds; repeated strings are dictionary-encoded so a million-row table of op
names stays small. Bump SCHEMA_VERSION when a column changes meaning or type
(documented in docs/store.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, KeysView, Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

import pyarrow as pa

from tpuscope.schema_consts import SCHEMA_VERSION, SEVERITIES  # noqa: F401  (re-exported)
from tpuscope.schema_rows import (
    CallSiteRow,
    CompileRow,
    FallbackRow,
    MetricRow,
    RetraceRow,
    StepRow,
)
from tpuscope.step_runs import normalize_runs, runs_count, runs_text, step_runs

if TYPE_CHECKING:
    from typing_extensions import Unpack

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
            pa.field("output_shapes", pa.list_(pa.string())),
            pa.field("input_gb", pa.float64()),
            pa.field("output_gb", pa.float64()),
            pa.field("aliased_gb", pa.float64()),
            pa.field("intermediate_gb", pa.float64()),
            pa.field("program_gb", pa.float64()),
            # who compiled: torch_xla, jax or torch_tpu; for JAX the jitted function (or the
            # library function of an eager op, eager=True). Null in runs before schema 2,
            # which analyze/families reads from the cause text instead.
            pa.field("backend", _dict_str),
            pa.field("function", pa.string()),
            pa.field("eager", pa.bool_()),
            # JAX's persistent compilation cache for this compile, as JAX's own events said:
            # "hit" (loaded, not compiled), "miss" (compiled and written to the cache),
            # "unwritten" (compiled with the cache on, not written: under
            # jax_persistent_cache_min_compile_time_secs or min entry size); null: no cache
            # (no jax_compilation_cache_dir), or torch_xla (its counters say it: metrics)
            pa.field("persistent_cache", _dict_str),
            # JAX: the backend compile alone (what a persistent cache hit replaces with a load;
            # tracing and lowering stay), inside duration_ns; null for torch_xla
            pa.field("backend_compile_ns", pa.int64()),
            # JAX: the host callback whose Python compiled this op ("jax.debug.callback(fn) @
            # file:line"): an op it ran on its arguments outside jit; null for any other compile
            pa.field("callback", pa.string()),
        ]
    ),
    # One row per (step, op that ran on the host instead of the device (aten, torchvision, custom), call site).
    # location: the user's line; library_frame: the innermost library frame inside that
    # call (e.g. transformers/generation/utils.py:2480), null when the user called torch.
    "fallbacks": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("op", _dict_str),
            pa.field("count", pa.int64()),
            pa.field("location", pa.string()),
            pa.field("library_frame", pa.string()),
        ]
    ),
    # Why a function was traced again (JAX's cache-miss explanations): one row per
    # difference against the closest earlier cache key. kind: first, redefined,
    # input_types, pytree, static_arg, tracing_context, debug_info, unknown.
    "retraces": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("compile_index", pa.int64()),
            pa.field("time_ns", pa.int64()),
            pa.field("function", _dict_str),
            pa.field("defined_at", pa.string()),
            pa.field("location", pa.string()),
            pa.field("kind", _dict_str),
            pa.field("arg", pa.string()),
            pa.field("before", pa.string()),
            pa.field("after", pa.string()),
            pa.field("detail", pa.string()),
        ]
    ),
    # Where in the user's code something happened, counted per step.
    # kind: host_sync (name: float, item, print, device_get, block_until_ready, ...)
    # or eager_dispatch (name: the primitive run outside jit). library_frame: the
    # innermost library frame inside the user's call that did it (null if none).
    "call_sites": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("step", pa.int64()),
            pa.field("kind", _dict_str),
            pa.field("name", _dict_str),
            pa.field("location", pa.string()),
            pa.field("count", pa.int64()),
            pa.field("library_frame", pa.string()),
        ]
    ),
    # --- Device view (docs/device_view.md): xplane traces, XLA HLO, xprof's analyses ---
    # One row per trace event. start_ns is epoch ns when the trace says when it started
    # (else the trace's own clock); step: the step whose wall-time window holds the event.
    "trace_events": pa.schema(
        PROCESS_FIELDS
        + [pa.field(c, _dict_str) for c in ("plane", "line", "name")]
        + [
            pa.field("start_ns", pa.int64()),
            pa.field("dur_ns", pa.int64()),
            pa.field("step", pa.int64()),
        ]
        + [pa.field(c, _dict_str) for c in ("hlo_op", "hlo_module", "hlo_category")]
        + [
            pa.field("program_id", pa.uint64()),
            pa.field("flops", pa.int64()),
            pa.field("bytes_accessed", pa.int64()),
        ]
        + [pa.field(c, _dict_str) for c in ("source", "tf_op", "graph_hash")]
    ),
    # Per device and step window: time the device ran XLA ops (union of op intervals)
    # and idle time. window: "steps" (tpuscope's steps), "trace steps" (markers in the
    # trace), "whole trace" (step -1: no step boundaries known).
    "device_steps": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("device", _dict_str),
            pa.field("step", pa.int64()),
            pa.field("start_ns", pa.int64()),
            pa.field("end_ns", pa.int64()),
            pa.field("busy_ns", pa.int64()),
            pa.field("idle_ns", pa.int64()),
            pa.field("ops", pa.int64()),
            pa.field("window", _dict_str),
        ]
    ),
    # One row per parsed HLO module (an XLA dump file, or a module seen in a trace).
    "hlo_modules": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("module", _dict_str),
            pa.field("stage", _dict_str),
            pa.field("source", pa.string()),
        ]
        + [
            pa.field(c, pa.int64())
            for c in ("instructions", "computations", "dots", "convolutions")
        ]
        + [
            pa.field(c, pa.float64())
            for c in ("matmul_flops", "param_bytes", "output_bytes", "top_level_bytes")
        ]
        # the entry computation and its ROOT instruction: what the module takes and gives
        + [pa.field("entry", pa.string()), pa.field("root", pa.string())]
    ),
    # One row per HLO instruction; dots and convolutions carry their matmul view
    # (batch x [M,K] @ [K,N]) and flops = 2*batch*M*N*K.
    "hlo_ops": pa.schema(
        PROCESS_FIELDS
        + [pa.field(c, _dict_str) for c in ("module", "stage", "computation")]
        + [
            pa.field("name", pa.string()),
            pa.field("opcode", _dict_str),
            pa.field("shape", pa.string()),
            pa.field("layout", pa.string()),  # minor-to-major ("2,3,1,0"); lanes first on a TPU
            pa.field("dtype", _dict_str),
            pa.field("operands", pa.list_(pa.string())),
            pa.field("fusion", pa.string()),
            pa.field("op_type", _dict_str),
            pa.field("op_name", pa.string()),
            pa.field("source_file", _dict_str),
            pa.field("source_line", pa.int64()),
        ]
        + [pa.field(c, pa.int64()) for c in ("batch", "m", "n", "k")]
        + [pa.field(c, _dict_str) for c in ("lhs_dtype", "rhs_dtype", "precision")]
        + [pa.field("flops", pa.float64())]
    ),
    # xprof's overview_page figures, one row each (value: the number, "86.5%" -> 86.5).
    "xprof_overview": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("source", pa.string()),
            pa.field("name", _dict_str),
            pa.field("value", pa.float64()),
            pa.field("text", pa.string()),
        ]
    ),
    # xprof's per-HLO-op statistics (hlo_stats), with op_profile's and roofline_model's
    # utilization figures for the same op.
    "xprof_ops": pa.schema(
        PROCESS_FIELDS
        + [
            pa.field("program_id", pa.string()),
            pa.field("category", _dict_str),
            pa.field("hlo_op", pa.string()),
            pa.field("expression", pa.string()),
            pa.field("tf_op", pa.string()),
            pa.field("occurrences", pa.int64()),
        ]
        + [
            pa.field(c, pa.float64())
            for c in (
                "total_time_us",
                "avg_time_us",
                "self_time_us",
                "self_time_percent",
                "model_gflops_per_s",
                "normalized_gflops_per_s",
                "hbm_gibps",
                "operational_intensity",
                "flops_utilization",
                "hbm_utilization",
                "roofline_efficiency",
            )
        ]
        + [pa.field("bound_by", _dict_str), pa.field("source_info", pa.string())]
        # XLA's FLOPs and HBM bytes per occurrence (op_profile's raw counts; the cost model's input)
        + [pa.field("xla_flops", pa.float64()), pa.field("xla_bytes", pa.float64())]
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
            # the steps as runs of consecutive steps, [[first, last], ...] (tpuscope/step_runs.py),
            # and how many steps in all (more than the runs cover when they were capped)
            pa.field("step_runs", pa.list_(pa.list_(pa.int64()))),
            pa.field("evidence", pa.string()),
            pa.field("step_count", pa.int64()),
        ]
    ),
}


_PROCESS_NAMES = {f.name for f in PROCESS_FIELDS}
_ROW_COLUMNS = {
    name: tuple(n for n in schema.names if n not in _PROCESS_NAMES)
    for name, schema in TABLES.items()
}


@overload
def table_row(table: Literal["steps"], **fields: Unpack[StepRow]) -> StepRow: ...
@overload
def table_row(table: Literal["metrics"], **fields: Unpack[MetricRow]) -> MetricRow: ...
@overload
def table_row(table: Literal["compiles"], **fields: Unpack[CompileRow]) -> CompileRow: ...
@overload
def table_row(table: Literal["fallbacks"], **fields: Unpack[FallbackRow]) -> FallbackRow: ...
@overload
def table_row(table: Literal["retraces"], **fields: Unpack[RetraceRow]) -> RetraceRow: ...
@overload
def table_row(table: Literal["call_sites"], **fields: Unpack[CallSiteRow]) -> CallSiteRow: ...
def table_row(table: str, **fields: Any) -> Mapping[str, Any]:
    """One row of `table` with every column the writer owns (the process fields are the
    session's): absent ones are None, and a name the schema lacks is an error, so the
    places that build rows cannot drift from the schema or from each other. Its keys and
    their types are the table's row type (tpuscope/schema_rows.py), which mypy checks."""
    names = _ROW_COLUMNS[table]
    unknown = fields.keys() - names
    if unknown:
        raise KeyError(f"{table} has no column(s) {', '.join(sorted(unknown))}")
    return {name: fields.get(name) for name in names}


def table_columns(table: str, **columns: Sized) -> dict[str, Sized]:
    """Rows of `table` given column-wise (equal-length lists, numpy arrays or the store's
    Repeat and Coded columns: store/columns.py), for writers that add many rows
    at once: checked like `table_row` (a name the schema lacks is an error), once per batch
    rather than per row; columns left out are null when written (store/buffer)."""
    unknown = columns.keys() - _ROW_COLUMNS[table]
    if unknown:
        raise KeyError(f"{table} has no column(s) {', '.join(sorted(unknown))}")
    if len({len(values) for values in columns.values()}) > 1:
        raise ValueError(f"{table}: columns of different lengths")
    return columns


class JsonObject(Protocol):
    """A JSON object as its readers see it: a dict, or a record of the analysis contract
    (tpuscope/analyze/records.py) that reads as the object it writes."""

    def __getitem__(self, key: str, /) -> Any: ...

    def __contains__(self, key: object, /) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def keys(self) -> KeysView[str]: ...

    def get(self, key: str, default: Any = None, /) -> Any: ...


@dataclass
class Finding:
    """One diagnosis: what is wrong, where, what it costs and the change that fixes it.

    Its steps are runs of consecutive steps ([[2, 999999]]) with their count, never a list of
    every step (tpuscope/step_runs.py): `Finding.of_steps` makes both from any steps.

    Its `evidence` is its rule's typed record (tpuscope/analyze/contract.py) as the rule made
    it, or as the analysis read it back; a plain dict from a script or a row read here (the
    contract lives above this module: run_analysis types it)."""

    rule: str
    severity: str
    title: str
    detail: str
    fix: str
    location: str | None = None
    cost_s: float = 0.0
    step_runs: list[list[int]] = field(default_factory=list)
    evidence: JsonObject = field(default_factory=dict[str, Any])
    step_count: int = 0

    def __post_init__(self) -> None:
        """A finding's missing values, made plain here once whatever it was read from (a pyarrow
        row gives None, a pandas row NaN): no location is None, no cost 0.0, no steps []."""
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        if not isinstance(self.location, str) or not self.location:
            self.location = None
        if self.cost_s is None or self.cost_s != self.cost_s:
            self.cost_s = 0.0
        self.step_runs = normalize_runs(self.step_runs)
        count = self.step_count
        count = 0 if count is None or count != count else int(count)
        self.step_count = count or runs_count(self.step_runs)

    @staticmethod
    def of_steps(steps: Any) -> tuple[list[list[int]], int]:
        """(step_runs, step_count) of any steps (an array, a Series, a list)."""
        return step_runs(steps)

    @property
    def steps_text(self) -> str:
        """'2-999999', or '0-2, 5, ... 90-99 (120 steps)': the steps as every surface prints them."""
        return runs_text(self.step_runs, self.step_count)

    def to_row(self) -> dict[str, Any]:
        row = self.to_dict()
        row["evidence"] = json.dumps(row["evidence"], default=str, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Finding:
        data: dict[str, Any] = {k: row.get(k) for k in cls.__dataclass_fields__}
        data["evidence"] = json.loads(row.get("evidence") or "{}")
        return cls(**data)  # missing values made plain in __post_init__

    def to_dict(self) -> dict[str, Any]:
        """Plain data; a shallow copy of the fields (dataclasses.asdict deep-copies every
        nested value, seconds on a storm's evidence), the evidence as its JSON object."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["evidence"] = plain_evidence(self.evidence)
        return data


def plain_evidence(evidence: JsonObject) -> dict[str, Any]:
    """A finding's evidence as the JSON object it writes (a record's `to_dict`, a dict as is)."""
    to_dict = getattr(evidence, "to_dict", None)
    return to_dict() if callable(to_dict) else {key: evidence[key] for key in evidence}
