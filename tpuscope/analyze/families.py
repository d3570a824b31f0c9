"""Graph families, and which compiles are recompiles: judged by graph identity and recurrence.

A family is what the program compiles from one place in its code:
- torch_xla (and imported PT_XLA_DEBUG logs): the user's line that cut the graph
  (or torch_xla's stated cause when no user frame is known) and the graph's
  structure: the dtype and rank of every input when the shapes are known, else the
  number of inputs; and the number of outputs. A setup graph, an eval graph, the
  optimizer's first step (which creates its state) and the steady-state step are
  different families, so each one's first compile is a first compile, wherever it happens.
- JAX: the jitted function (its name and the static argument positions it was jitted
  with). Every further compile of it is a recompile, whatever JAX's explanation says
  differed (a retrace: new shapes or dtypes, another pytree, a new static value, a
  re-definition). An op run outside jit is its own family (the `op_by_op` rule's business).
- A compile with nothing known of it (no line, no cause, no inputs) is its own family.
- In a loop that passes no sync (its steps end at optimizer steps, collect/xla/steps.py), a
  torch_xla compile's family is its line alone: nothing materialises the loop's tensors, so
  each read's graph holds all the work since the last one and grows (more inputs every time);
  the same line compiling again in a later step is the line's graph grown, a recompile.

A torch_xla compile of a family that compiled before is judged by evidence (the `verdict`
and `reason` columns), never by being second:
- "recompile", reason "evicted": the same graph hash compiled again (the cache lost it);
- "recompile", reason "recurred": the family compiled in a later step than its first pass
  (the step of its first compile): the line ran again, its graphs had run, and it needed a
  new one. Steps are the collector's; an imported log has none, so there a compile made at
  a sync ends a step;
- "recompile", reason "new shapes": in the first pass, a graph with the same input
  structure whose input shapes differ (the same graph at new sizes);
- "warmup": in the family's first pass, a distinct graph (shapes unknown or the same): a
  library that cuts several graphs at one line in one pass (generate()'s prefill and
  decode, a trainer's first logging pass, xm.mesh_reduce's rendezvous) compiles each once;
- "recompile", reason "new graph every step": a family's first graph, at a line that has
  compiled a graph of a new family in each of the last STREAK steps (this one included): the
  line's graph changes from step to step (its input structure: a layer skipped at random by
  LayerDrop, a mask's size), so each step is a new family and none recurs, yet the line never
  settles. Two transitions at a line are what a loop makes (the first step, then the
  optimizer's first, which creates its state); a third in a row is the graph changing.
  Compiles with nothing known (eager mode's op compiles) count as one place; torch_xla only;
- "bounded": the family's recompiles form a small set that stopped growing: each graph
  compiled once, no more than MAX_BOUNDED graphs, and the loop ran without a new graph for
  at least as many steps after the last one as it took to collect them (and as there are
  graphs); with shapes known, only when a bucketing plan would not cut the set (the sizes
  are buckets already). A one-off cost, not a recompile; JAX
  keeps its rule.

Pure: a compiles DataFrame in (and the loop's last step per process), the same rows with
family columns out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeGuard, cast

import pandas as pd

from tpuscope.analyze.frames import records
from tpuscope.analyze.shapes import parse_shape, suggest_buckets, varying_dims

FAMILY_COLUMNS = (
    "family",
    "family_seq",
    "recompile",
    "verdict",
    "reason",
    "cut",
    "function",
    "eager",
    "backend",
)
GROWS = "the graph grows (no sync in the loop)"  # a no-sync loop's family: its line alone
MAX_BOUNDED = 8  # graphs a bounded set (buckets) may have
STREAK = 3  # steps in a row in which one line compiled a new family: its graph changes per step
NEW_EVERY_STEP = "new graph every step"
UNKNOWN_LINE = "no line known"  # compiles with no line and no cause, as one place
MAX_BUCKET_WASTE = 0.10  # the padding a bucketing plan may add (detect/shape_churn.MAX_WASTE)
_BOUNDARY = re.compile(r"sync|mark_step|step end")
_VALUE_READ = "access tensor value"
# The JAX collector's cause vocabulary (collect/jax/explain.cause_text, docs/backends.md), read
# only for runs written before schema 2 (compiles.backend / .function / .eager columns).
_PERSISTENT = re.compile(r" \[persistent cache [a-z]+\]$")
_JAX_EAGER = re.compile(r"^JAX library function (?P<fn>\S+) compiled for a call outside jit")
_JAX_FUNCTION = (
    re.compile(r"^first trace of (?P<fn>.+)$"),
    re.compile(r"^retrace of (?P<fn>[^:]+): "),
    re.compile(r"^(?P<fn>.+?) re-defined on every call"),
    re.compile(r"^compile of jitted (?P<fn>\S+) \(library code"),
    re.compile(r"^compile of (?P<fn>.+)$"),
)


def _known(value: Any) -> TypeGuard[Any]:
    """Not None and not NaN (a missing value read from pandas)."""
    return value is not None and not (isinstance(value, float) and value != value)


def jax_program(cause: Any) -> tuple[str | None, bool]:
    """(jitted function, is an eager op) from a JAX compile row's cause; (None, False) for a
    cause the JAX collector does not write (a torch_xla row)."""
    if not isinstance(cause, str):
        return None, False
    text = _PERSISTENT.sub("", cause)
    if match := _JAX_EAGER.match(text):
        return match["fn"], True
    for pattern in _JAX_FUNCTION:
        if match := pattern.match(text):
            return match["fn"], False
    return None, False


def _jax_function(row: dict[str, Any]) -> tuple[str | None, bool]:
    """The collector's own columns; the cause text only for runs written before schema 2."""
    if _known(row.get("function")):
        return row["function"], bool(row.get("eager"))
    return jax_program(row.get("cause"))


def _shape_list(row: dict[str, Any], column: str = "input_shapes") -> list[str] | None:
    value = row.get(column)
    return list(value) if _known(value) else None


def _signature(row: dict[str, Any]) -> str:
    shapes = _shape_list(row)
    if shapes:
        parsed = [parse_shape(s) for s in shapes]
        inputs = ",".join(
            f"{p.dtype}/{len(p.dims)}" if p is not None else str(s)
            for p, s in zip(parsed, shapes, strict=True)
        )
    else:
        n = row.get("num_inputs")
        inputs = f"{int(n)} inputs" if _known(n) else ""
    outputs = row.get("num_outputs")
    return f"{inputs} -> {int(outputs)} outputs" if inputs and _known(outputs) else inputs


def _xla_family(row: dict[str, Any]) -> str | None:
    site = row.get("location") if _known(row.get("location")) else None
    site = site or (row.get("cause") if _known(row.get("cause")) else None)
    signature = _signature(row)
    if not site and not signature:
        return None
    return f"{site or 'unknown line'} | {signature or 'inputs unknown'}"


def _process(row: dict[str, Any]) -> str:
    return f"{row.get('host')}/{row.get('pid')}"


def _backend(row: dict[str, Any], backends: dict[str, str]) -> str:
    if _known(row.get("backend")):  # written by the collector (schema 2 on)
        return row["backend"]
    known = backends.get(_process(row))
    if known == "jax" or (known is None and jax_program(row.get("cause"))[0]):
        return "jax"
    return known or "torch_xla"


def process_backends(meta: dict[str, Any]) -> dict[str, str]:
    """'host/pid' -> the backend that process reported (meta['processes'])."""
    return {
        f"{p.get('host')}/{p.get('pid')}": p["backend"]
        for p in meta.get("processes", [])
        if p.get("backend")
    }


_JAX_MODULE = re.compile(r"^(jit|pjit|pmap|xmap|shard_map)_")
_TORCH_XLA_MODULE = re.compile(r"^(SyncTensorsGraph|IrToHlo)")


def backend_of_modules(modules: Iterable[str]) -> str | None:
    """The framework that named a trace's HLO modules, where the run has no process to say:
    JAX names each module after its jitted function (`jit_train_step`), torch_xla its graphs
    `SyncTensorsGraph.N`; None when neither."""
    names = [str(m) for m in modules]
    if any(_JAX_MODULE.match(m) for m in names):
        return "jax"
    if any(_TORCH_XLA_MODULE.match(m) for m in names):
        return "torch_xla"
    return None


def _boundary_cause(cause: Any) -> bool:
    """A compile torch_xla made at a step boundary (a sync), not at a value read."""
    return isinstance(cause, str) and bool(_BOUNDARY.search(cause)) and _VALUE_READ not in cause


class _Judge:
    """The verdict on each compile of a run, row by row in time order."""

    def __init__(self) -> None:
        self.graphs: dict[str, list[dict[str, Any]]] = {}  # family -> its compiles so far
        self.cuts: dict[str, int] = {}  # process -> steps ended by syncs (imported rows)
        self.fresh: dict[str, list[int]] = {}  # 'process | line' -> steps it compiled a new family

    def cut(self, row: dict[str, Any], process: str) -> int:
        """The compile's step; for rows without one (imported logs), syncs counted so far."""
        step = row.get("step")
        if _known(step) and int(step) >= 0:
            return int(step)
        count = self.cuts.get(process, 0)
        if _boundary_cause(row.get("cause")):
            self.cuts[process] = count + 1
        return count

    def verdict(
        self, row: dict[str, Any], family: str, cut: int, backend: str
    ) -> tuple[str, str | None]:
        earlier = self.graphs.setdefault(family, [])
        entry = {"hash": row.get("graph_hash"), "cut": cut, "shapes": _shape_list(row)}
        earlier.append(entry)
        if len(earlier) == 1:
            if backend != "jax" and self._changes_every_step(row, cut):
                return "recompile", NEW_EVERY_STEP
            return "first", None
        if backend == "jax":
            return "recompile", "retrace"
        before = earlier[:-1]
        if _known(entry["hash"]) and any(e["hash"] == entry["hash"] for e in before):
            return "recompile", "evicted"
        if (
            cut > before[0]["cut"]
        ):  # after the family's first pass: it had run, and needs a new graph
            return "recompile", "recurred"
        shapes = entry["shapes"]
        if shapes and any(e["shapes"] and e["shapes"] != shapes for e in before):
            return "recompile", "new shapes"
        return "warmup", None

    def _changes_every_step(self, row: dict[str, Any], cut: int) -> bool:
        """Whether the compile's line has compiled a new family in each of the last STREAK
        steps, this one included. Compiles with no line and no cause (torch_xla eager mode's
        op compiles) count as one place: new ones in every step are ops compiled again at new
        shapes (a data-dependent size), which nothing else would catch."""
        line = row.get("location") if _known(row.get("location")) else row.get("cause")
        line = line if _known(line) and line else UNKNOWN_LINE
        steps = self.fresh.setdefault(f"{_process(row)} | {line}", [])
        if not steps or steps[-1] != cut:
            steps.append(cut)
        return steps[-STREAK:] == list(range(cut - STREAK + 1, cut + 1))


def graph_families(
    compiles: pd.DataFrame,
    backends: dict[str, str] | None = None,
    loop_end: dict[str, int] | None = None,
    unsynced: set[tuple[str, int]] | None = None,
) -> pd.DataFrame:
    """The compiles in time order, each with its family, its number within the family
    (0 = first compile), its verdict (first, warmup, recompile, bounded) and why, whether it
    is a recompile, and the JAX function / eager flag. `loop_end` ('host/pid' -> last loop
    step, PodSteps.loop_ends()) lets a set of graphs that stopped growing be seen as one; `unsynced`
    ('host/pid', step): the steps of a loop with no sync (analyze/pod_sql.PodSteps.unsynced_steps)."""
    columns = {name: pd.Series(dtype=object) for name in FAMILY_COLUMNS}
    if compiles.empty:
        return compiles.assign(**columns)
    order = [c for c in ("time_ns", "index") if c in compiles.columns]
    ordered = compiles.sort_values(order, kind="stable") if order else compiles
    backends = backends or {}
    judge = _Judge()
    out: dict[str, list[Any]] = {name: [] for name in FAMILY_COLUMNS}
    for n, row in enumerate(records(ordered)):
        backend = _backend(row, backends)
        function, eager = _jax_function(row) if backend == "jax" else (None, False)
        process = _process(row)
        family = _family(row, n, backend, function, eager, _unsynced(row, process, unsynced))
        cut = judge.cut(row, process)
        verdict, reason = judge.verdict(row, family, cut, backend)
        values = (
            family,
            len(judge.graphs[family]) - 1,
            verdict == "recompile",
            verdict,
            reason,
            cut,
            function,
            eager,
            backend,
        )
        for name, value in zip(FAMILY_COLUMNS, values, strict=True):
            out[name].append(value)
    frame = ordered.assign(**out)
    return _bounded(frame, loop_end or {})


def _bounded(frame: pd.DataFrame, loop_end: dict[str, int]) -> pd.DataFrame:
    """Mark the recompiles of families whose graphs form a small set that stopped growing."""
    again = frame[frame["verdict"] == "recompile"]
    if again.empty or not loop_end:
        return frame
    verdict, recompile = frame["verdict"].copy(), frame["recompile"].copy()
    for family in again["family"].unique():
        rows = frame[frame["family"] == family]
        if _is_bounded(rows, loop_end):
            mask = (frame["family"] == family) & (frame["verdict"] == "recompile")
            verdict[mask], recompile[mask] = "bounded", False
    return frame.assign(verdict=verdict, recompile=recompile)


def _is_bounded(rows: pd.DataFrame, loop_end: dict[str, int]) -> bool:
    if not may_be_bounded(rows):
        return False
    last = loop_end.get(_process(cast(dict[str, Any], rows.iloc[0].to_dict())))
    first, newest = int(rows["cut"].min()), int(rows["cut"].max())
    return last is not None and last - newest >= max(len(rows), newest - first + 1)


def may_be_bounded(rows: pd.DataFrame) -> bool:
    """Whether a family's compiles so far can still be judged a bounded set, once the loop has
    run long enough without a new graph (the live alerts wait for that before saying
    "recompile", launch/alerts/): torch_xla, each graph compiled once, no more than
    MAX_BOUNDED, and no bucketing plan that would cut the set."""
    if rows["family"].astype(str).str.endswith(GROWS).any():
        return False  # a graph that grows with the loop is never a set that stopped growing
    if (rows["backend"] == "jax").any() or not rows["reason"].dropna().isin(
        ["recurred", "new shapes"]
    ).all():
        return False
    hashes = [h for h in rows["graph_hash"] if _known(h)] if "graph_hash" in rows else []
    if len(hashes) != len(rows) or len(set(hashes)) != len(rows) or len(rows) > MAX_BOUNDED:
        return False
    return not _plan_cuts(rows)


def _plan_cuts(rows: pd.DataFrame) -> bool:
    """With shapes known, whether a bucketing plan would compile fewer graphs than the sizes seen
    (the set is churn, not buckets); False when shapes are unknown (nothing to plan from)."""
    lists = (
        [list(s) for s in rows["input_shapes"] if _known(s) and len(s)]
        if "input_shapes" in rows
        else []
    )
    if len(lists) != len(rows) or len({len(x) for x in lists}) != 1:
        return False
    dims = varying_dims(lists)
    if not dims:
        return False
    sizes = max(dims, key=lambda d: len(d.distinct)).distinct
    return len(suggest_buckets(sizes, MAX_BUCKET_WASTE).buckets) < len(sizes)


def _unsynced(row: dict[str, Any], process: str, unsynced: set[tuple[str, int]] | None) -> bool:
    step = row.get("step")
    return unsynced is not None and _known(step) and (process, int(step)) in unsynced


def _family(
    row: dict[str, Any],
    n: int,
    backend: str,
    function: str | None,
    eager: bool,
    unsynced: bool = False,
) -> str:
    process = _process(row)
    if backend == "jax":
        if eager or not function:
            return f"{process} | eager #{n}"
        return f"{process} | jit {function}"
    site = row.get("location") if _known(row.get("location")) else None
    if unsynced and site:
        return f"{process} | {site} | {GROWS}"
    family = _xla_family(row)
    return f"{process} | {family}" if family else f"{process} | unknown #{n}"


def recompiles(families: pd.DataFrame) -> pd.DataFrame:
    """The rows that are recompiles (verdict "recompile": evicted, recurred or new shapes)."""
    if families.empty or "recompile" not in families:
        return families.iloc[0:0]
    return families[families["recompile"].astype(bool)]


def bounded(families: pd.DataFrame) -> pd.DataFrame:
    """The rows of bounded sets (each graph compiled once, the set stopped growing)."""
    if families.empty or "verdict" not in families:
        return families.iloc[0:0]
    return families[families["verdict"] == "bounded"]
