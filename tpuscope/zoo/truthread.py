"""Reading a cell's truth file (written by zoo/truth.py inside the cell's process)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VALUE_READS = ("aten::_local_scalar_dense", "xla::_local_scalar_dense")


@dataclass
class CellTruth:
    data: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> CellTruth | None:
        try:
            return cls(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    @property
    def labels(self) -> list[str]:
        return [m["label"] for m in self.data.get("marks", [])]

    @property
    def extra(self) -> dict[str, Any]:
        return self.data.get("extra", {})

    @property
    def error(self) -> dict[str, Any] | None:
        return self.data.get("error")

    def phases(self, prefix: str) -> list[str]:
        return [label for label in self.labels[:-1] if label.startswith(prefix)]

    def work(self, label: str) -> dict[str, int]:
        """Counter increments from the mark `label` to the next mark."""
        marks = self.data["marks"]
        i = self.labels.index(label)
        if i + 1 >= len(marks):
            return {}
        before, after = marks[i]["counters"], marks[i + 1]["counters"]
        return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}

    def per_phase(self, counter: str, prefix: str) -> list[int]:
        return [self.work(p).get(counter, 0) for p in self.phases(prefix)]

    def value_reads(self, label: str) -> int:
        work = self.work(label)
        return sum(work.get(name, 0) for name in VALUE_READS)

    @property
    def fallback_ops(self) -> list[str]:
        """executed_fallback_ops() without value reads (a value read is a host sync, not a fallback)."""
        return sorted(op for op in self.data.get("fallback_ops") or [] if op not in VALUE_READS)

    def fallback_calls(self, prefix: str) -> dict[str, list[int]]:
        """Per fallback op, its calls in each phase."""
        return {op: self.per_phase(op, prefix) for op in self.fallback_ops}
