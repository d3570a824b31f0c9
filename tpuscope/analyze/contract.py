"""THE analysis contract: what the analysis of a run states, as types every surface reads.

`detect/run_analysis.py` (the one analysis, at the boundary of analyze/ and detect/) makes a
`RunSummary` (with a `PodSummary` for a run of many hosts) and findings whose `evidence` has the
shape of its rule's record below. The console report, `show --json`, `ls`, `diff`, the gates, the
pytest watch and the dashboard read these attributes, never string keys, so a key renamed in
the analysis is a type error at every reader (mypy runs in CI: tests/test_types.py), not a
silent `None` in one of them.

Each rule makes its finding's record itself (tpuscope/detect/); the analysis types a stored
finding's evidence as its rule's record when it reads it back (run_analysis), so a surface
never meets a dict. The JSON forms (analysis.json, `show --json`, the findings table's
`evidence`) are unchanged: a record made by a rule writes the keys its rule always wrote, in
that order, and one read back writes exactly the object it was read from
(tpuscope/analyze/records.py), so the analysis.json of runs written before this contract still
read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tpuscope.analyze.evidence import (  # the evidence of each rule: part of the contract
    EVIDENCE,
    CompileTimeEvidence,
    Evidence,
    FallbackEvidence,
    HasEvidence,
    HostCallbackEvidence,
    HostSyncEvidence,
    OpByOpEvidence,
    RankDivergenceEvidence,
    RecompiledGraph,
    RecompileEvidence,
    ShapeChurnFacet,
    StormFacet,
    StragglerEvidence,
    TensorCoreEvidence,
    evidence_of,
)
from tpuscope.analyze.records import Record
from tpuscope.schema_consts import DEFAULT_WARMUP

__all__ = [
    "AfterLoop",
    "CompileCause",
    "CompileTimeEvidence",
    "FallbackOp",
    "HostSummary",
    "PodSummary",
    "RunSummary",
    "as_summary",
    "EVIDENCE",
    "Evidence",
    "FallbackEvidence",
    "HasEvidence",
    "HostCallbackEvidence",
    "HostSyncEvidence",
    "OpByOpEvidence",
    "RankDivergenceEvidence",
    "RecompileEvidence",
    "RecompiledGraph",
    "ShapeChurnFacet",
    "StormFacet",
    "StragglerEvidence",
    "TensorCoreEvidence",
    "evidence_of",
]

# ---- the summary --------------------------------------------------------------------------


@dataclass
class CompileCause(Record):
    """Compiles grouped by (cause, user frame): `summary.compile_causes`."""

    cause: str = "(cause unknown)"
    location: str | None = None
    count: int = 0
    seconds: float = 0.0
    first_step: int | None = None  # -1: imported totals, no step
    recompiles: int = 0


@dataclass
class FallbackOp(Record):
    """One op that ran on the host (value reads excluded): `summary.fallback_ops`."""

    op: str = ""
    count: int = 0
    step_runs: list[list[int]] = field(default_factory=list)
    step_count: int | None = None
    per_step: float = 0.0
    location: str | None = None


@dataclass
class AfterLoop(Record):
    """The work after the program's last step boundary: its own phase, not a step."""

    wall_s: float = 0.0
    compiles: int = 0
    compile_s: float = 0.0
    executions: int = 0


@dataclass
class HostSummary(Record):
    """One host of a pod: its processes, steps, median step, how it ended, the rules naming it."""

    host: str = ""
    processes: int = 0
    steps: int = 0
    p50_ms: float | None = None
    status: str | None = None
    rules: list[str] = field(default_factory=list)
    straggler: bool = False
    excess_ms: float | None = None


@dataclass
class PodSummary:
    """The summary of a run of many hosts: each host, and step time per host x step (binned:
    `hosts`, `steps`, `width`, `ms`, as analyze/pod_view.step_matrix_record writes it)."""

    hosts: list[HostSummary]
    host_steps: dict[str, Any] | None = None


@dataclass
class RunSummary(Record):
    """The headline figures of a run (analyze/summary.py computes them; run_analysis adds the
    findings' counts, imported counters and the pod). Field order is the JSON's key order."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        {
            "step_markers",
            "compiles_counted",
            "compile_cache",
            "hosts",
            "analysed_now",
            "parts_digest",
            "profiler_trace_s",
            "profiler_trace_stop_s",
            "profiler_trace_wait_s",
            "trace_untaken",
            "device_busy_share",
            "steps_batched",
        }
    )
    NESTED: ClassVar[dict[str, type[Record]]] = {
        "compile_causes": CompileCause,
        "fallback_ops": FallbackOp,
        "after_loop": AfterLoop,
        "hosts": HostSummary,
    }

    run_id: str | None = None
    name: str | None = None
    command: Any = None  # a list of words for a program run, a string for an import
    status: str | None = None
    exit_code: int | None = None
    backend: str | None = None
    device_kind: str | None = None
    processes: int = 0
    warmup: int = DEFAULT_WARMUP
    duration_s: float | None = None
    steps: int = 0
    steps_judged: int = 0
    step_time_p50_ms: float | None = None
    step_time_p90_ms: float | None = None
    # steps of a dispatch-bound loop timed in batches (collect/jax/lane.py): each the mean of its
    # batch's calls, so the p90 is of those means
    steps_batched: int | None = None
    wall_s_judged: float = 0.0
    compiles: int = 0
    compile_s: float = 0.0
    graph_families: int = 0
    graphs: int = 0  # distinct graphs compiled (analyze/summary.distinct_graphs): the cards' count
    recompiles: int = 0
    recompile_s: float = 0.0
    run_wall_s: float | None = None
    recompile_share: float = 0.0
    compile_causes: list[CompileCause] = field(default_factory=list)
    fallback_ops: list[FallbackOp] = field(default_factory=list)
    value_reads: int = 0
    transfers_from_device_per_step: float = 0.0
    after_loop: AfterLoop | None = None
    profiler_ms_per_step: float | None = None
    profiler_hook_ms_per_step: float | None = None  # its part on the program's own thread
    profiler_ms_per_compile: float | None = None
    findings_by_severity: dict[str, int] = field(default_factory=dict)
    findings_by_rule: dict[str, int] = field(default_factory=dict)
    step_markers: int | None = None  # imported whole-run counters (a metrics report)
    compiles_counted: int | None = None
    # the persistent compilation cache as the runtime reported it (detect/compile_time.py):
    # backend, on, dir, and its first compiles loaded (hits), compiled and written (misses), or
    # compiled and not written (unwritten)
    compile_cache: dict[str, Any] | None = None
    target: str | None = None  # the chip the estimates are for (detect/tensorcore.chip_target)
    profiler_trace_s: float | None = None  # a profiler window's start and stop, once (no step's)
    profiler_trace_stop_s: float | None = None  # of it, the stop (where the collector timed it)
    profiler_trace_wait_s: float | None = None  # of the stop, the wait for the device
    # on a TPU, the automatic trace's steps never came: {"start", "stop"}, the window's
    trace_untaken: dict[str, int] | None = None
    device_busy_share: float | None = None  # busy a step / the untraced step (else the traced)
    analysis_version: int | None = None
    hosts: list[HostSummary] | None = None  # a pod (two or more hosts) only
    host_steps: dict[str, Any] | None = None
    analysed_now: str | None = None  # why a read computed the analysis instead of reading it
    parts_digest: str | None = None  # the parts a stored analysis was computed from

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; `host_steps` is written with `hosts` (a pod), null when no step was
        judged."""
        out = super().to_dict()
        if self.key_order is None and self.hosts is None:
            out.pop("host_steps", None)
        return out

    @property
    def pod(self) -> PodSummary | None:
        """The pod's part of the summary, None for a run of one host."""
        return PodSummary(self.hosts, self.host_steps) if self.hosts else None

    @pod.setter
    def pod(self, pod: PodSummary | None) -> None:
        self.hosts, self.host_steps = (pod.hosts, pod.host_steps) if pod else (None, None)

    @property
    def findings_count(self) -> int:
        """How many findings the analysis made (every severity)."""
        return int(sum(self.findings_by_severity.values()))

    @property
    def fallback_count(self) -> int:
        """Calls of ops that ran on the host, every op."""
        return int(sum(op.count for op in self.fallback_ops))


def as_summary(summary: RunSummary | dict[str, Any]) -> RunSummary:
    """A summary as the contract's record, from the record or its JSON form (a hand-built or
    stored analysis: `tpuscope diff` of two analysis.json files, a script's dict)."""
    return summary if isinstance(summary, RunSummary) else RunSummary.from_dict(summary)
