"""Finish a run: run the detectors over its tables, store the findings, build the summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuscope.analyze.summary import summarize
from tpuscope.detect import RunTables, detect
from tpuscope.schema import Finding
from tpuscope.store import Run


@dataclass
class RunReport:
    """What every renderer shows: headline figures and findings, costliest first."""

    summary: dict[str, Any]
    findings: list[Finding]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "findings": [f.to_dict() for f in self.findings]}


def analyze(run: Run, redetect: bool = True) -> RunReport:
    """Summary plus findings; with redetect the findings are recomputed and stored."""
    if redetect:
        findings = detect(RunTables.from_run(run))
        run.write_findings(findings)
    else:
        findings = run.findings_list()
    summary = summarize(run.meta, run.steps, run.compiles, run.fallbacks)
    summary["findings_by_severity"] = {
        sev: sum(f.severity == sev for f in findings) for sev in ("high", "medium", "low")
    }
    return RunReport(summary=summary, findings=sorted(findings, key=lambda f: -f.cost_s))
