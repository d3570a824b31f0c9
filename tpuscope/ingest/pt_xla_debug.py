"""PT_XLA_DEBUG logs (compilation/execution analysis, `pt-xla-profiler:` notes) -> rows.

The block parser is the collector's own (tpuscope.parse.pt_xla_debug), so a log a
user saved reads exactly like the text tpuscope tails live. Compiles become
`compiles` rows with step -1 (the log does not number steps) and no duration (it
does not time them). The older auto-metrics notes say what torch_xla itself
counted, and become rows too: "CompileTime too frequent: 21 counts during 11
steps" -> CompileTime samples and MarkStep counter (the last note wins: they are
cumulative), "Op(s) not lowered: aten::_ctc_loss, ..." -> fallbacks rows whose
count 0 means "named without a count".
"""

from __future__ import annotations

import re
from pathlib import Path

from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.parse.pt_xla_debug import DebugLog, GraphRecord, parse_debug_text
from tpuscope.parse.xla_counter_names import is_fallback_counter
from tpuscope.schema import table_row
from tpuscope.schema_rows import CompileRow, FallbackRow, MetricRow

_FREQUENT = re.compile(
    r"^(?P<name>\w+) too frequent: (?P<count>\d+) counts during (?P<steps>\d+) steps"
)
_NOT_LOWERED = re.compile(r"^Op\(s\) not lowered: (?P<ops>.*?)(?:\s+Please open.*)?$")
SNIFF = re.compile(
    rb"^(Compilation Analysis: |Execution Analysis: |pt-xla-profiler: )", re.MULTILINE
)


def _compile_row(index: int, record: GraphRecord) -> CompileRow:
    return table_row(
        "compiles",
        backend="torch_xla",
        step=-1,
        index=index,
        graph_hash=record.graph_hash or None,
        cause=record.cause or None,
        location=record.location,
        frames=record.frames,
        num_inputs=record.num_inputs,
        num_outputs=record.num_outputs,
        **record.sizes,
    )


def _notes(notes: list[str]) -> tuple[list[MetricRow], list[FallbackRow]]:
    """(metrics rows, fallbacks rows) from the auto-metrics notes; last count of each name wins."""
    counts: dict[str, int] = {}
    steps = 0
    ops: list[str] = []
    for note in notes:
        frequent = _FREQUENT.match(note)
        if frequent:
            counts[frequent["name"]] = int(frequent["count"])
            steps = max(steps, int(frequent["steps"]))
            continue
        lowered = _NOT_LOWERED.match(note)
        if lowered:
            ops += [
                op.strip() for op in lowered["ops"].split(",") if is_fallback_counter(op.strip())
            ]
    metrics = [
        MetricRow(step=-1, name=name, kind="metric", count=count, total=0.0)
        for name, count in counts.items()
    ]
    if steps:
        metrics.append(MetricRow(step=-1, name="MarkStep", kind="counter", count=steps, total=0.0))
    fallbacks = [FallbackRow(step=-1, op=op, count=0, location=None) for op in dict.fromkeys(ops)]
    return metrics, fallbacks


def evidence_from_log(log: DebugLog) -> Imported:
    evidence = Imported()
    evidence.add("compiles", [_compile_row(i, r) for i, r in enumerate(log.compiles)])
    metrics, fallbacks = _notes(log.profiler_notes)
    if log.executions:
        metrics.append(
            {
                "step": -1,
                "name": "ExecuteComputation",
                "kind": "counter",
                "count": len(log.executions),
                "total": 0.0,
            }
        )
    evidence.add("metrics", metrics)
    evidence.add("fallbacks", fallbacks)
    evidence.summary = (
        f"PT_XLA_DEBUG log: {len(log.compiles)} compiles, {len(log.executions)} executions, "
        f"{len(log.profiler_notes)} pt-xla-profiler notes"
    )
    return evidence


def load(path: Path) -> Imported:
    log = parse_debug_text(Path(path).read_text(errors="replace"))
    if log.malformed:
        raise ValueError(f"malformed line: {log.malformed[0]!r}")
    if not (log.compiles or log.executions or log.profiler_notes):
        raise ValueError("no complete Compilation/Execution Analysis block or pt-xla-profiler note")
    return evidence_from_log(log)


IMPORTER = register(
    Importer(
        name="pt_xla_debug",
        description="PT_XLA_DEBUG log (Compilation/Execution Analysis blocks, pt-xla-profiler notes)",
        sniff=lambda path, head: path.is_file() and bool(SNIFF.search(head)),
        load=load,
    )
)
