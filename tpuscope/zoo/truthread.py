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

    def groups(self, prefix: str) -> list[list[str]]:
        """The steps: each mark starting with prefix, with the sub-marks (e.g. "token:0:3") up
        to the next step's mark or the end."""
        out: list[list[str]] = []
        for label in self.labels[:-1]:
            if label.startswith(prefix):
                out.append([label])
            elif out and label != "end":
                out[-1].append(label)
        return out

    def step_work(self, group: list[str]) -> dict[str, int]:
        total: dict[str, int] = {}
        for label in group:
            for k, v in self.work(label).items():
                total[k] = total.get(k, 0) + v
        return total

    def per_phase(self, counter: str, prefix: str) -> list[int]:
        """One counter's increments per step (a step's sub-marks summed in)."""
        return [self.step_work(g).get(counter, 0) for g in self.groups(prefix)]

    def value_reads(self, label: str | list[str]) -> int:
        work = self.step_work([label] if isinstance(label, str) else label)
        return sum(work.get(name, 0) for name in VALUE_READS)

    @property
    def fallback_ops(self) -> list[str]:
        """executed_fallback_ops() without value reads (a value read is a host sync, not a fallback)."""
        return sorted(op for op in self.data.get("fallback_ops") or [] if op not in VALUE_READS)

    def fallback_calls(self, prefix: str) -> dict[str, list[int]]:
        """Per fallback op, its calls in each phase."""
        return {op: self.per_phase(op, prefix) for op in self.fallback_ops}

    def per_token_compiles(self) -> list[list[int]]:
        """generate: UncachedCompile per token mark of each request (empty for other scenarios)."""
        out: list[list[int]] = []
        for group in self.groups("request:"):
            out.append([self.work(label).get("UncachedCompile", 0) for label in group[1:]])
        return out
