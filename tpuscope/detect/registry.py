"""The default detector registry and the tables every detector receives."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from tpuscope.analyze.families import graph_families, process_backends
from tpuscope.schema import Finding


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
        return graph_families(self.compiles, process_backends(self.meta))

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
        return cls(meta=run.meta, steps=run.steps, compiles=run.compiles,
                   fallbacks=run.fallbacks, metrics=run.metrics, extra=extra)


Detector = Callable[[RunTables], list[Finding]]
DETECTORS: list[Detector] = []  # rules of one host's tables (a pod: each host alone, detect/pod.py)
POD_DETECTORS: list[Detector] = []  # rules that judge the hosts against each other (2+ hosts)


def detect(tables: RunTables, detectors: list[Detector] | None = None) -> list[Finding]:
    """Every finding of every detector, most severe first, then costliest. The default rules
    judge a run of many hosts host by host (findings merged per root cause, naming the hosts)
    and the pod rules judge the hosts against each other; given detectors run on the whole run."""
    if detectors is not None:
        return sorted([f for detector in detectors for f in detector(tables)], key=order)
    from tpuscope.detect.pod import detect_per_host, run_hosts

    hosts = run_hosts(tables)
    if len(hosts) < 2:
        findings = [f for detector in DETECTORS for f in detector(tables)]
    else:
        findings = detect_per_host(tables, DETECTORS, hosts)
        findings += [f for detector in POD_DETECTORS for f in detector(tables)]
    return sorted(findings, key=order)


def order(finding: Finding) -> tuple[int, float, str]:
    """The order every surface lists findings in: severity, then cost."""
    from tpuscope.schema import SEVERITIES

    return (SEVERITIES.index(finding.severity), -finding.cost_s, finding.rule)
