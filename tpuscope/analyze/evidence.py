"""The evidence of each rule: one record per rule, the shape of a finding's `evidence`.

Part of the analysis contract (tpuscope/analyze/contract.py, which re-exports these names):
each rule (tpuscope/detect/) makes its finding's record itself, and a stored finding's
evidence is typed as its rule's record when the analysis reads it back (run_analysis). The
JSON form is unchanged: a record writes its keys in declared order (tpuscope/analyze/records.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from tpuscope.analyze.records import Record

if TYPE_CHECKING:  # annotations only: schema pulls in pyarrow, which a launcher never needs
    from tpuscope.schema import JsonObject

E = TypeVar("E", bound="Evidence")


class HasEvidence(Protocol):
    """A finding as the contract sees it (tpuscope.schema.Finding)."""

    rule: str
    evidence: JsonObject


# ---- the evidence of each rule ------------------------------------------------------------


@dataclass
class Evidence(Record):
    """A finding's evidence. A rule judged host by host on a pod (detect/pod.py) adds the hosts
    its finding was seen on; those keys are on every rule's record."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        {"hosts", "hosts_total", "worst_host", "cost_s_per_host"}
    )
    RULE: ClassVar[str] = ""
    OPEN: ClassVar[bool] = False  # keys not declared here are expected (measured figures by name)

    hosts: list[str] | None = None
    hosts_total: int | None = None
    worst_host: str | None = None
    cost_s_per_host: dict[str, float] | None = None

    @classmethod
    def of(cls: type[E], finding: HasEvidence) -> E:
        """The finding's evidence as this record: the record its rule made, or (a dict, another
        rule's record) one read from its JSON form, whose declared keys only are typed."""
        evidence = finding.evidence
        return evidence if isinstance(evidence, cls) else cls.from_dict(evidence)

    def on_hosts(self: E, hosts: list[str], total: int, worst: str, cost_s: dict[str, float]) -> E:
        """This evidence naming the hosts of a pod its finding was seen on (detect/pod.py): the
        rule's keys as they were, the hosts' after them."""
        return self.with_values(
            hosts=hosts, hosts_total=total, worst_host=worst, cost_s_per_host=cost_s
        )

    @property
    def undeclared(self) -> list[str]:
        """Keys the producer wrote that this record does not declare (none, for a closed one)."""
        return [] if self.OPEN else sorted(self.extra)


@dataclass
class RecompiledGraph(Record):
    """One recompile of a recompile finding (`evidence.compiles`, the first 50)."""

    step: int | None = None
    index: int | None = None
    graph_hash: str | None = None
    cause: str | None = None
    location: str | None = None
    family: str | None = None
    function: str | None = None
    duration_s: float = 0.0
    reason: str | None = None
    changes: list[str] = field(default_factory=list)
    against_graph: str | None = None


@dataclass
class ShapeChurnFacet(Record):
    """The varying dim of a recompiled family (detect/shape_churn.py), with a bucketing plan."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(  # the plan: three sizes or more
        {"buckets", "plan", "padding_waste", "how", "saved_compiles", "saved_s"}
    )

    arg: int | None = None
    arg_name: str | None = None
    dim: int | None = None
    dtype: str | None = None
    values: list[int] = field(default_factory=list)
    linked_dims: list[Any] = field(default_factory=list)
    graphs: int = 0
    max_waste: float | None = None
    graph_hashes: list[str] = field(default_factory=list)
    buckets: list[int] | None = None
    plan: str | None = None
    padding_waste: float | None = None
    how: str | None = None
    saved_compiles: int | None = None
    saved_s: float | None = None


@dataclass
class StormFacet(Record):
    """Most steps of the loop compiled again."""

    loop_steps: int = 0
    recompiling_steps: int = 0


@dataclass
class RecompileEvidence(Evidence):
    """Rule `recompile`: a family's recompiles (verdict "recompile"), a bounded set of buckets
    (verdict "bounded"), or imported totals (`compiles` a count, `source` "imported totals")."""

    RULE: ClassVar[str] = "recompile"
    OMIT_NONE: ClassVar[frozenset[str]] = Evidence.OMIT_NONE | {
        "graphs",
        "quiet_steps",
        "last_step",
        "per_1000_steps",
        "s_per_1000_steps",
        "shape_churn",
        "storm",
        "steps",
        "source",
        "files",
    }
    # the other shapes' keys, in the order written (the declared order is a recompile's)
    BOUNDED: ClassVar[tuple[str, ...]] = (
        "verdict",
        "graphs",
        "graph_hashes",
        "location",
        "backend",
        "compile_s",
        "recompiles",
        "run_wall_s",
        "share",
        "facets",
    )
    IMPORTED: ClassVar[tuple[str, ...]] = ("compiles", "steps", "source", "files")
    NESTED: ClassVar[dict[str, type[Record]]] = {
        "compiles": RecompiledGraph,
        "shape_churn": ShapeChurnFacet,
        "storm": StormFacet,
    }

    graph_hash: str | None = None
    graph_hashes: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    compiles: list[RecompiledGraph] | int = field(default_factory=list)
    location: str | None = None
    function: str | None = None
    backend: str | None = None
    recompiles: int = 0
    compile_s: float = 0.0
    verdict: str | None = None
    graphs: int | None = None
    run_wall_s: float = 0.0
    share: float = 0.0
    recurring: bool | None = None
    quiet_steps: int | None = None
    last_step: int | None = None
    per_1000_steps: float | None = None
    s_per_1000_steps: float | None = None
    facets: list[str] = field(default_factory=list)
    shape_churn: ShapeChurnFacet | None = None
    storm: StormFacet | None = None
    steps: int | None = None
    source: str | None = None
    files: list[str] | None = None

    @property
    def graphs_recompiled(self) -> list[RecompiledGraph]:
        """The recompiles listed (none for imported totals, which count them only)."""
        return self.compiles if isinstance(self.compiles, list) else []


@dataclass
class FallbackEvidence(Evidence):
    """Rule `cpu_fallback`: one op that torch_xla ran on the host."""

    RULE: ClassVar[str] = "cpu_fallback"
    OMIT_NONE: ClassVar[frozenset[str]] = Evidence.OMIT_NONE | {"source", "files"}

    op: str | None = None
    count: int = 0
    per_step: float | None = None
    sites: list[dict[str, Any]] = field(default_factory=list)
    traced_step_runs: list[list[int]] = field(default_factory=list)
    alternative: str | None = None
    source: str | None = None
    files: list[str] | None = None


@dataclass
class HostSyncEvidence(Evidence):
    """Rule `host_sync`: device-to-host reads per step and their call sites."""

    RULE: ClassVar[str] = "host_sync"
    OMIT_NONE: ClassVar[frozenset[str]] = Evidence.OMIT_NONE | {
        "share_of_host_reads",
        "source",
        "value_reads",
        "host_reads",
        "step_markers",
        "files",
        "unmarked_runs",
        "device_idle_s_per_step",
        "read_wait_s_per_step",
        "read_lost_s_per_step",
    }

    reads_per_step: float = 0.0
    sites: list[dict[str, Any]] = field(default_factory=list)
    share_of_host_reads: float | None = None  # steps judged: the reads' share of host reads
    source: str | None = None  # imported totals: what they count, over their step markers
    value_reads: int | None = None
    host_reads: int | None = None
    step_markers: int | None = None
    files: list[str] | None = None
    # a loop with no step marker: graph runs in the one stretch the reads came in (no per-step rate)
    unmarked_runs: int | None = None
    # JAX on a traced chip, per traced step that read: the device's idle time, the host's wait
    # in the reads, and the part of the idle time the reads cost (at most the longer of that
    # wait and the device's busy time: detect/read_idle)
    device_idle_s_per_step: float | None = None
    read_wait_s_per_step: float | None = None
    read_lost_s_per_step: float | None = None


@dataclass
class OpByOpEvidence(Evidence):
    """Rule `op_by_op`: ops dispatched one by one (torch_xla eager mode, JAX outside jit)."""

    RULE: ClassVar[str] = "op_by_op"
    OMIT_NONE: ClassVar[frozenset[str]] = Evidence.OMIT_NONE | {  # torch_xla's keys, or JAX's
        "executions_per_step",
        "source",
        "dispatches_per_step",
        "jit_calls_per_step",
        "eager_dispatch_s",
        "device_idle_s_per_step",
        "cost_basis",
        "wall_s",
        "eager_time_share",
        "top_lines",
        "top_primitives",
        "backend",
    }

    executions_per_step: float | None = None
    source: str | None = None
    dispatches_per_step: float | None = None
    jit_calls_per_step: float | None = None
    eager_dispatch_s: float | None = None
    device_idle_s_per_step: float | None = None  # the device idle while the host dispatched
    cost_basis: str | None = None  # "device idle (trace)" or "host dispatch time"
    wall_s: float | None = None
    eager_time_share: float | None = None
    top_lines: list[dict[str, Any]] | None = None
    top_primitives: list[dict[str, Any]] | None = None
    backend: str | None = None


@dataclass
class TensorCoreEvidence(Evidence):
    """Rule `tensorcore_underuse`: estimated (cost model: a step graph's problems as facets),
    measured (xprof's MXU figures) or the device idle in traced steps. Each shape writes its
    own keys (detect/tensorcore.py and tensorcore_measured.py state their order); open to a measurement not named here."""

    RULE: ClassVar[str] = "tensorcore_underuse"
    OPEN: ClassVar[bool] = True
    MEASURED: ClassVar[tuple[str, ...]] = (  # xprof's overview_page, as the rule reads it
        "mxu_utilization_percent",
        "device_duty_cycle_percent",
        "device_idle_time_percent",
    )

    basis: str | None = None
    cost_figure: str | None = None
    target: str | None = None
    kind: str | None = None
    share_of_step: float | None = None
    padding_share_by_generation: dict[str, float] | None = None
    # the problem's matmuls (analyze/tensorcore._describe); the last five by kind
    count: int | None = None
    location: str | None = None
    lines: list[str] | None = None
    module_paths: list[str] | None = None
    flops: float | None = None
    shapes: list[str] | None = None
    head_dim: int | None = None
    dims: list[int] | None = None
    padded: list[int] | None = None
    precision: list[str] | None = None
    rows: list[int] | None = None
    roofline: dict[str, Any] | None = None
    facets: list[dict[str, Any]] = field(default_factory=list)
    kinds: list[str | None] = field(default_factory=list)
    library_lines: list[str] = field(default_factory=list)
    graph_site: str | None = None
    matmul_time_percent: float | None = None
    top_ops: list[dict[str, Any]] | None = None
    idle_share: float | None = None
    devices: list[str] | None = None
    idle_in_calls_s_per_step: float | None = None  # of the idle, the host inside jitted calls
    mxu_utilization_percent: float | None = None
    device_duty_cycle_percent: float | None = None
    device_idle_time_percent: float | None = None
    # measured on the chip (analyze/op_time): per traced step
    lost_s_per_step: float | None = None
    op_s_per_step: float | None = None
    device_s_per_step: float | None = None
    traced_steps: int | None = None
    scopes: list[str] | None = None
    ops_around: int | None = None  # f32: the ops that move the f32 matmuls' activations
    f32_kernels: list[str] | None = None  # f32: Pallas kernels on f32 inputs, not counted
    f32_kernels_s: float | None = None  # f32: their measured time a step
    random_bits_ops: int | None = None  # f32: ops making threefry random bits, left out
    random_bits_s: float | None = None  # f32: their measured time a step
    idle_compile_s: float | None = None


@dataclass
class StragglerEvidence(Evidence):
    """Rule `straggler`: one host slower than the pod (docs/pods.md)."""

    RULE: ClassVar[str] = "straggler"

    host: str = ""
    p50_ms: float | None = None
    pod_p50_ms: float | None = None
    excess_ms: float | None = None
    noise_ms: float | None = None
    threshold_ms: float | None = None
    cause: dict[str, Any] | None = None


@dataclass
class RankDivergenceEvidence(Evidence):
    """Rule `rank_divergence`: graphs or ops some hosts ran and others did not, or counts apart."""

    RULE: ClassVar[str] = "rank_divergence"
    # its two shapes' keys, in the order written: what some hosts did at a line, graphs per host
    AT_LINE: ClassVar[tuple[str, ...]] = (
        "hosts",
        "present_on",
        "missing_on",
        "hosts_total",
        "items",
        "only",
    )
    GRAPH_COUNTS: ClassVar[tuple[str, ...]] = ("hosts", "hosts_total", "graphs_per_host")

    present_on: list[str] | None = None
    missing_on: list[str] | None = None
    items: list[dict[str, Any]] | None = None
    only: Any = None
    graphs_per_host: dict[str, int] | None = None


@dataclass
class CompileTimeEvidence(Evidence):
    """Rule `compile_time`: the run's first compiles by kind (step, eager, setup and other) at the
    user's lines, the persistent cache as the runtime reported it, and the program's earlier
    runs that compiled the same graphs (detect/compile_time.py)."""

    RULE: ClassVar[str] = "compile_time"

    backend: str | None = None
    compile_s: float = 0.0
    compiles: int = 0
    run_wall_s: float | None = None
    share: float | None = None
    groups: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[str, Any] | None = None
    history: dict[str, Any] | None = None


@dataclass
class HostCallbackEvidence(Evidence):
    """Rule `host_callback`: one callback compiled into the step, its runs on the host."""

    RULE: ClassVar[str] = "host_callback"

    api: str = ""
    function: str = ""
    runs_per_step: float = 0.0
    host_s_per_step: float = 0.0  # wall time of its runs (sleeps, I/O, lock waits included)
    cpu_s_per_step: float = 0.0  # CPU time of its runs: the cost where no trace timed the wait
    waited: bool = True  # the device waits for it (results, an ordered effect, the CPU backend)
    judged_steps: int = 0
    platform: str | None = None
    # what a TPU waited for it a step, measured (its host transfers in the trace): the cost
    device_wait_s_per_step: float | None = None
    # its runs took OUTPACED of the judged steps outside compiles, unordered, no trace: the
    # host fell behind the device, and the cost is their wall time
    outpaced: bool = False
    ops_per_step: float = 0.0  # JAX ops its Python ran on its arguments outside jit
    ops_s_per_step: float = 0.0  # their host time, their compiles included
    op_compiles: int = 0  # compiles of those ops in the run (detect/callback_ops.py)
    op_compile_s: float = 0.0


EVIDENCE: dict[str, type[Evidence]] = {
    cls.RULE: cls
    for cls in (
        RecompileEvidence,
        CompileTimeEvidence,
        FallbackEvidence,
        HostSyncEvidence,
        OpByOpEvidence,
        TensorCoreEvidence,
        StragglerEvidence,
        RankDivergenceEvidence,
        HostCallbackEvidence,
    )
}


def evidence_of(finding: HasEvidence) -> Evidence:
    """The finding's evidence as its rule's record (the base record for a rule not listed)."""
    return EVIDENCE.get(finding.rule, Evidence).of(finding)
