"""What one JAX step accumulates, and the rows it becomes.

Kept lean on purpose: a jitted train step can take 0.1 ms, and this runs once per
step. A step that only called the step function produces one `steps` row and no
other rows; dictionaries are created only when something else happened.
"""

from __future__ import annotations

from typing import Any

# Host syncs that copy a value to the host (block_until_ready only waits).
VALUE_READS = frozenset({"float", "int", "bool", "index", "complex", "item", "tolist", "tobytes",
                         "print", "np.asarray", "device_get"})


def _bump(table: dict | None, key: Any, by: int = 1) -> dict:
    if table is None:
        return {key: by}
    table[key] = table.get(key, 0) + by
    return table


class StepAcc:
    """Counts of one step; dict fields stay None until used."""

    __slots__ = ("compiles", "compile_ns", "jit_calls", "calls", "eager", "eager_ns", "syncs",
                 "sites", "metrics")

    def __init__(self) -> None:
        self.compiles = 0
        self.compile_ns = 0
        self.jit_calls = 0  # every top-level call of a jitted function
        self.calls: dict[str, int] | None = None  # per function, except calls of the step function
        self.eager: dict[str, int] | None = None  # primitive -> eager dispatches
        self.eager_ns = 0
        self.syncs: dict[str, int] | None = None  # kind -> count
        self.sites: dict[tuple[str, str, str | None, str | None], int] | None = None  # (kind, name, location, library)
        self.metrics: dict[str, list[float]] | None = None  # name -> [count, total ns]

    def has_work(self) -> bool:
        return bool(self.compiles or self.jit_calls or self.eager or self.syncs)

    def call(self, name: str) -> None:
        self.jit_calls += 1
        self.calls = _bump(self.calls, name)

    def sync(self, kind: str, location: str | None, library: str | None = None) -> None:
        self.syncs = _bump(self.syncs, kind)
        self.sites = _bump(self.sites, ("host_sync", kind, location, library))

    def dispatch(self, primitive: str, location: str | None, library: str | None, elapsed_ns: int) -> None:
        self.eager = _bump(self.eager, primitive)
        self.eager_ns += elapsed_ns
        self.sites = _bump(self.sites, ("eager_dispatch", primitive, location, library))

    def metric(self, name: str, value_ns: float | None) -> None:
        if self.metrics is None:
            self.metrics = {}
        entry = self.metrics.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += value_ns or 0.0


def step_row(acc: StepAcc, step: int, boundary: str, start_ns: int, end_ns: int) -> dict[str, Any]:
    eager = sum(acc.eager.values()) if acc.eager else 0
    syncs = acc.syncs
    return {
        "step": step, "start_ns": start_ns, "end_ns": end_ns, "wall_ns": end_ns - start_ns,
        "boundary": boundary, "compiles": acc.compiles, "compile_ns": acc.compile_ns,
        "executions": acc.jit_calls + eager, "execute_ns": None, "fallback_ops": 0,
        "transfers_from_device": sum(c for k, c in syncs.items() if k in VALUE_READS) if syncs else 0,
        "graph_hashes": [],
    }


def metric_rows(acc: StepAcc, step: int) -> list[dict[str, Any]]:
    """Counters (jit calls per function, eager primitives, host syncs) and timed metrics."""
    counters: list[tuple[str, int]] = []
    if acc.calls:
        counters.append(("jax.jit_calls", acc.jit_calls))
        counters += [(f"jax.jit_calls/{n}", c) for n, c in acc.calls.items()]
    if acc.eager:
        counters += [(f"jax.eager/{p}", c) for p, c in acc.eager.items()]
    if acc.syncs:
        counters += [(f"jax.host_syncs/{k}", c) for k, c in acc.syncs.items()]
    rows = [{"step": step, "name": n, "kind": "counter", "count": int(c), "total": 0.0} for n, c in counters]
    if acc.eager:
        rows.append({"step": step, "name": "jax.eager_dispatch_time", "kind": "metric",
                     "count": sum(acc.eager.values()), "total": float(acc.eager_ns)})
    for name, (count, total) in (acc.metrics or {}).items():
        rows.append({"step": step, "name": name, "kind": "metric" if total else "counter",
                     "count": int(count), "total": float(total)})
    return rows


def site_rows(acc: StepAcc, step: int) -> list[dict[str, Any]]:
    return [{"step": step, "kind": kind, "name": name, "location": location, "library_frame": library,
             "count": count} for (kind, name, location, library), count in (acc.sites or {}).items()]
