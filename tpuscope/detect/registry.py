"""The default detector registry and the tables every detector receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tpuscope.schema import Finding


@dataclass
class RunTables:
    """What a detector may read: meta plus DataFrames (empty when a table is absent)."""

    meta: dict[str, Any]
    steps: pd.DataFrame
    compiles: pd.DataFrame
    fallbacks: pd.DataFrame
    metrics: pd.DataFrame
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def warmup(self) -> int:
        return int(self.meta.get("warmup", 2))

    @classmethod
    def from_run(cls, run: Any) -> RunTables:
        return cls(meta=run.meta, steps=run.steps, compiles=run.compiles,
                   fallbacks=run.fallbacks, metrics=run.metrics)


Detector = Callable[[RunTables], list[Finding]]
DETECTORS: list[Detector] = []


def detect(tables: RunTables, detectors: list[Detector] | None = None) -> list[Finding]:
    """Every finding of every detector, costliest first."""
    findings: list[Finding] = []
    for detector in DETECTORS if detectors is None else detectors:
        findings.extend(detector(tables))
    return sorted(findings, key=lambda f: (-f.cost_s, f.rule))
