"""The rows the collectors and importers build one at a time, typed by table.

A row crosses from the collector to the store as a dict (store/buffer keeps dicts until a
flush converts them); these TypedDicts say which keys each table's row has and what they
hold, so mypy checks every `schema.table_row(...)` call: a misspelt column or a string in a
count fails the type check, not a write. The columns are those of `schema.TABLES` without
the process fields (the session adds them); tests/test_types.py checks the two agree. Every
value may be None: a column a row leaves out is written as null. The tables written column
by column (steps, a batch's metrics and call sites) are checked by `schema.table_columns`.
"""

from __future__ import annotations

from typing import Literal, TypedDict


class MetricRow(TypedDict, total=False):
    step: int | None
    name: str | None
    kind: str | None  # counter or metric
    count: int | None
    total: float | None


class StepRow(TypedDict, total=False):
    step: int | None
    start_ns: int | None
    end_ns: int | None
    wall_ns: int | None
    boundary: str | None
    compiles: int | None
    compile_ns: int | None
    executions: int | None
    execute_ns: int | None
    fallback_ops: int | None
    transfers_from_device: int | None
    graph_hashes: list[str] | None


# the compile sizes a PT_XLA_DEBUG analysis block reports (GB), by their compiles column
SizeColumn = Literal["input_gb", "output_gb", "aliased_gb", "intermediate_gb", "program_gb"]


class CompileSizes(TypedDict, total=False):
    input_gb: float
    output_gb: float
    aliased_gb: float
    intermediate_gb: float
    program_gb: float


class CompileRow(TypedDict, total=False):
    step: int | None
    index: int | None
    time_ns: int | None
    duration_ns: int | None
    graph_hash: str | None
    cause: str | None
    location: str | None
    frames: list[str] | None
    num_inputs: int | None
    num_outputs: int | None
    input_shapes: list[str] | None
    output_shapes: list[str] | None
    input_gb: float | None
    output_gb: float | None
    aliased_gb: float | None
    intermediate_gb: float | None
    program_gb: float | None
    backend: str | None
    function: str | None
    eager: bool | None
    persistent_cache: str | None
    backend_compile_ns: int | None
    callback: str | None


class FallbackRow(TypedDict, total=False):
    step: int | None
    op: str | None
    count: int | None
    location: str | None
    library_frame: str | None


class RetraceRow(TypedDict, total=False):
    step: int | None
    compile_index: int | None
    time_ns: int | None
    function: str | None
    defined_at: str | None
    location: str | None
    kind: str | None
    arg: str | None
    before: str | None
    after: str | None
    detail: str | None


class CallSiteRow(TypedDict, total=False):
    step: int | None
    kind: str | None
    name: str | None
    location: str | None
    count: int | None
    library_frame: str | None


ROW_TYPES: dict[str, type] = {
    "steps": StepRow,
    "metrics": MetricRow,
    "compiles": CompileRow,
    "fallbacks": FallbackRow,
    "retraces": RetraceRow,
    "call_sites": CallSiteRow,
}
