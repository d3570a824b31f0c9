"""The default detector registry and the tables every detector receives."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from tpuscope.analyze.families import graph_families, loop_ends, process_backends
from tpuscope.analyze.judge import phases
from tpuscope.detect.ordering import order
from tpuscope.schema import Finding

# A list of graph hashes per step that no rule reads (compiles has them): on a million steps,
# a million Python lists to build and to carry through every selection.
UNREAD_STEP_COLUMNS = ("graph_hashes",)


class LazyTables(Mapping[str, pd.DataFrame]):
    """A run's other tables, each read on first access: a trace can hold millions of
    events that most detectors never look at."""

    def __init__(self, run: Any, names: list[str]) -> None:
        self._run, self._names, self._cache = run, names, {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._run.table(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class RunTables:
    """What a detector may read: meta plus DataFrames (empty when a table is absent)."""

    meta: dict[str, Any]
    steps: pd.DataFrame
    compiles: pd.DataFrame
    fallbacks: pd.DataFrame
    metrics: pd.DataFrame
    extra: Mapping[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def warmup(self) -> int:
        return int(self.meta.get("warmup", 2))

    @cached_property
    def families(self) -> pd.DataFrame:
        """The compiles with their graph family and recompile flag (analyze/families.py)."""
        return graph_families(self.compiles, process_backends(self.meta), loop_ends(self.loop))

    @cached_property
    def phase(self) -> pd.Series:
        """Per step row: warmup, judged or after (analyze/judge.phases), computed once: every
        detector asks, and on a million steps each ask cost 0.4 s."""
        return phases(self.steps, self.warmup)

    @cached_property
    def judged(self) -> pd.DataFrame:
        """The judged steps (analyze/judge), selected once for every detector."""
        return self.steps if self.steps.empty else self.steps[self.phase.to_numpy() == "judged"]

    @cached_property
    def loop(self) -> pd.DataFrame:
        """Every step of the loop (warm-up included, the after-the-loop step not)."""
        return self.steps if self.steps.empty else self.steps[self.phase.to_numpy() != "after"]

    @cached_property
    def _metric_index(self) -> dict[Any, Any]:
        metrics = self.metrics
        return {} if metrics.empty else metrics.groupby("name", sort=False, dropna=True).indices

    def metric_rows(self, names: Iterable[str]) -> pd.DataFrame:
        """The metrics rows of some names, in table order. The table is grouped by name once:
        selecting a name by comparing strings cost ~0.2 s per ask on 6M rows."""
        import numpy as np

        index = self._metric_index
        found = [index[n] for n in dict.fromkeys(names) if n in index]
        if not found:
            return self.metrics.iloc[0:0]
        return self.metrics.iloc[np.sort(np.concatenate(found))]

    @property
    def backend(self) -> str:
        """The run's backend: "torch_xla", "jax" or "torch_tpu" (torch_xla when unknown)."""
        found = [b for b in process_backends(self.meta).values()]
        if found:
            return found[0]
        families = self.families
        return str(families["backend"].iloc[0]) if not families.empty else "torch_xla"

    @classmethod
    def from_run(cls, run: Any) -> RunTables:
        """Every table of the run: the four main ones as fields, the others in `extra`."""
        from tpuscope.schema import TABLES

        main = ("steps", "compiles", "fallbacks", "metrics", "findings")
        extra = LazyTables(run, [name for name in TABLES if name not in main])
        steps = [c for c in TABLES["steps"].names if c not in UNREAD_STEP_COLUMNS]
        return cls(meta=run.meta, steps=run.table("steps", columns=steps), compiles=run.compiles,
                   fallbacks=run.fallbacks, metrics=run.metrics, extra=extra)


Detector = Callable[[RunTables], list[Finding]]
DETECTORS: list[Detector] = []  # rules of one host's tables (a pod: each host alone, detect/pod.py)
POD_DETECTORS: list[Detector] = []  # rules that judge the hosts against each other (2+ hosts)

__all__ = ["DETECTORS", "POD_DETECTORS", "Detector", "RunTables", "detect", "order"]
_defaults_added = False


def register_defaults() -> None:
    """Put the default rules first in the registry, once. Done on first use, not at import:
    the rule modules import this one (for RunTables), and readers of a stored analysis import
    neither (tpuscope/detect/__init__.py). Once only: a rule taken out of the list stays out."""
    global _defaults_added
    if _defaults_added:
        return
    from tpuscope.detect.cpu_fallback import detect_cpu_fallback
    from tpuscope.detect.host_sync import detect_host_sync
    from tpuscope.detect.op_by_op import detect_op_by_op
    from tpuscope.detect.rank_divergence import detect_rank_divergence
    from tpuscope.detect.recompile import detect_recompile
    from tpuscope.detect.straggler import detect_straggler
    from tpuscope.detect.tensorcore import detect_tensorcore_underuse

    rules = (detect_recompile, detect_cpu_fallback, detect_host_sync, detect_op_by_op,
             detect_tensorcore_underuse)
    DETECTORS[:0] = [rule for rule in rules if rule not in DETECTORS]
    pod_rules = (detect_straggler, detect_rank_divergence)  # hosts against each other (detect/pod.py)
    POD_DETECTORS[:0] = [rule for rule in pod_rules if rule not in POD_DETECTORS]
    _defaults_added = True


def detect(tables: RunTables, detectors: list[Detector] | None = None) -> list[Finding]:
    """Every finding of every detector, most severe first, then costliest. The default rules
    judge a run of many hosts host by host (findings merged per root cause, naming the hosts)
    and the pod rules judge the hosts against each other; given detectors run on the whole run."""
    if detectors is not None:
        return sorted([f for detector in detectors for f in detector(tables)], key=order)
    from tpuscope.detect.pod import detect_per_host, run_hosts

    register_defaults()
    hosts = run_hosts(tables)
    if len(hosts) < 2:
        findings = [f for detector in DETECTORS for f in detector(tables)]
    else:
        findings = detect_per_host(tables, DETECTORS, hosts)
        findings += [f for detector in POD_DETECTORS for f in detector(tables)]
    return sorted(findings, key=order)
