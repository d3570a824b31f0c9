"""The one analysis of a run: graph families, judged steps, findings and the summary.

It runs once when a run ends (and again on `tpuscope show --reanalyze` or an import)
and writes its result into the run: the `findings` table and `analysis.json` (the
summary). Every surface — the console report, `show --json`, the dashboard, the
pytest plugin — reads what was written here, so they state the same counts.

Reading a current analysis imports neither the rules nor pandas (the detectors, the summary
and the tables load only in `_compute`): `show` of an ended run is its start-up and two files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuscope.detect.ordering import order
from tpuscope.schema import Finding
from tpuscope.store import Run

if TYPE_CHECKING:
    from tpuscope.detect.tables import RunTables

ANALYSIS_VERSION = 3  # bump when the analysis changes what it writes: older ones are redone


@dataclass
class RunReport:
    """What every renderer shows: headline figures and findings, most severe first."""

    summary: dict[str, Any]
    findings: list[Finding]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "findings": [f.to_dict() for f in self.findings]}


def _summary(tables: RunTables, findings: list[Finding]) -> dict[str, Any]:
    from tpuscope.analyze.summary import summarize
    from tpuscope.detect.pod import pod_summary

    summary = summarize(tables.meta, tables.steps, tables.families, tables.fallbacks, tables.metrics,
                        tables.phase)
    summary["findings_by_severity"] = {
        sev: sum(f.severity == sev for f in findings) for sev in ("high", "medium", "low")}
    summary["findings_by_rule"] = {rule: sum(f.rule == rule for f in findings)
                                   for rule in sorted({f.rule for f in findings})}
    summary["analysis_version"] = ANALYSIS_VERSION
    # a run of many hosts (a pod): each host's figures, the findings naming it, step time per host x step
    summary.update(pod_summary(tables, findings))
    return summary


def stored_summary(run: Run) -> dict[str, Any] | None:
    """The written summary while it is current (analysis.json newer than every table part, and
    from this version of the analysis), with who the run is and how it ended read from meta now:
    a run copied or renamed is its folder, a run ended since says so. Reads no table: what the
    Runs page and `ls` show of hundreds of runs."""
    meta = run.meta  # read first: a run from a newer tpuscope is refused here
    stored = run.analysis
    if stored is None or stored.get("analysis_version") != ANALYSIS_VERSION:
        return None
    start, end = meta.get("start_ns"), meta.get("end_ns")
    now = {"run_id": run.run_id, "name": meta.get("name"), "command": meta.get("command"),
           "status": meta.get("status"), "exit_code": meta.get("exit_code"),
           "duration_s": (end - start) / 1e9 if start and end else None}
    if stored.get("hosts"):  # a pod: how each host ended is read now too (a host lost since)
        now["hosts"] = hosts_ended_now(stored["hosts"], meta)
    return {**stored, **now}


def _stored(run: Run) -> RunReport | None:
    """The written analysis (stored_summary and the findings table) while it is current."""
    summary = stored_summary(run)
    if summary is None:
        return None
    return RunReport(summary=summary, findings=sorted(run.findings_list(), key=order))


def hosts_ended_now(hosts: list[dict[str, Any]], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored summary's hosts with each one's status as the run's meta says now."""
    status = {str(h.get("host")): h.get("status") for h in meta.get("hosts", [])}
    return [{**h, "status": status.get(str(h["host"]), h.get("status"))} for h in hosts]


def _compute(run: Run) -> RunReport:
    """Every rule on the run's tables, and the summary: the only place the rules are loaded."""
    from tpuscope.detect import RunTables, detect

    tables = RunTables.from_run(run)
    findings = detect(tables)
    return RunReport(summary=_summary(tables, findings), findings=findings)


def current(run: Run) -> RunReport:
    """The run's analysis as written, or (a run still going, one changed since, or one from an
    older tpuscope) computed now without writing: readers such as the dashboard never write."""
    return _stored(run) or _compute(run)


def analyze(run: Run, redetect: bool = True) -> RunReport:
    """Findings and summary; with redetect (or when the run has no stored analysis) they are
    computed and written into the run, else read back as written."""
    stored = None if redetect else _stored(run)
    if stored is not None:
        return stored
    report = _compute(run)
    run.write_findings(report.findings)
    run.write_analysis(report.summary)
    return report
