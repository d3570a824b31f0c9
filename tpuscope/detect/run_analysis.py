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

from tpuscope.analyze.contract import HostSummary, RunSummary, evidence_of
from tpuscope.detect.ordering import order
from tpuscope.schema import Finding
from tpuscope.schema_consts import SEVERITIES
from tpuscope.store import Run
from tpuscope.user_files import add_program_folders

if TYPE_CHECKING:
    from tpuscope.detect.tables import RunTables

ANALYSIS_VERSION = 40  # bump when the analysis changes what it writes: older ones are redone


@dataclass
class RunReport:
    """What every renderer shows: headline figures and findings, most severe first."""

    summary: RunSummary
    findings: list[Finding]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary.to_dict(), "findings": [f.to_dict() for f in self.findings]}


def _summary(tables: RunTables, findings: list[Finding]) -> RunSummary:
    import pandas as pd

    from tpuscope.detect.compile_time import cache_state
    from tpuscope.detect.pod import pod_summary
    from tpuscope.detect.pod_tables import PodTables
    from tpuscope.detect.step_idle import step_busy_share, traced_busy_share
    from tpuscope.detect.tensorcore import chip_target
    from tpuscope.detect.tensorcore_measured import xprof_figures

    summary = tables.summarize()
    summary.findings_by_severity = {
        sev: sum(f.severity == sev for f in findings) for sev in SEVERITIES
    }
    summary.findings_by_rule = {
        rule: sum(f.rule == rule for f in findings) for rule in sorted({f.rule for f in findings})
    }
    summary.step_markers, summary.compiles_counted = _imported_counts(tables)
    summary.compile_cache = cache_state(tables)
    summary.target = chip_target(tables.meta, tables.extra.get("xprof_overview", pd.DataFrame()))
    summary.device_busy_share = (
        traced_busy_share(tables.extra.get("device_steps", pd.DataFrame()))
        if isinstance(tables, PodTables)
        else step_busy_share(tables, xprof_figures(tables))
    )
    summary.analysis_version = ANALYSIS_VERSION
    # a run of many hosts (a pod): each host's figures, the findings naming it, step time per host x step
    summary.pod = pod_summary(tables, findings)
    return summary


def _imported_counts(tables: RunTables) -> tuple[int | None, int | None]:
    """What imported whole-run totals count (a metrics report's MarkStep and compile counters, a
    pt-xla-profiler note's): the step markers and compiles the findings judge imported evidence
    by, so the headline states the same counts as the cards (issue 29)."""
    from tpuscope.detect import common

    if tables.metrics.empty:
        return None, None
    marks = common.per_process(tables.metrics, ["MarkStep"])
    compiles = common.per_process(tables.metrics, ["CompileTime"]) or common.per_process(
        tables.metrics, ["UncachedCompile"]
    )
    return (
        int(sum(marks.values())) if marks else None,
        int(sum(compiles.values())) if compiles else None,
    )


def stored_summary(run: Run) -> RunSummary | None:
    """The written summary while it is current (analysis.json newer than every table part, and
    from this version of the analysis), with who the run is and how it ended read from meta now:
    a run copied or renamed is its folder, a run ended since says so. Reads no table: what the
    Runs page and `ls` show of hundreds of runs."""
    meta = run.meta  # read first: a run from a newer tpuscope is refused here
    stored = run.analysis
    if stored is None or stored.get("analysis_version") != ANALYSIS_VERSION:
        return None
    start, end = meta.get("start_ns"), meta.get("end_ns")
    summary = RunSummary.from_dict(stored)
    summary.run_id, summary.name, summary.command = (
        run.run_id,
        meta.get("name"),
        meta.get("command"),
    )
    summary.status, summary.exit_code = meta.get("status"), meta.get("exit_code")
    summary.duration_s = (end - start) / 1e9 if start and end else None
    if summary.hosts:  # a pod: how each host ended is read now too (a host lost since)
        summary.hosts = hosts_ended_now(summary.hosts, meta)
    return summary


def _stored(run: Run) -> RunReport | None:
    """The written analysis (stored_summary and the findings table) while it is current."""
    summary = stored_summary(run)
    if summary is None:
        return None
    return RunReport(summary=summary, findings=stored_findings(run))


def stored_findings(run: Run) -> list[Finding]:
    """The findings table as written, most severe then costliest first, each one's evidence as
    its rule's record (the table holds its JSON): what every surface lists of an ended run."""
    return sorted(map(_typed, run.findings_list()), key=order)


def _typed(finding: Finding) -> Finding:
    finding.evidence = evidence_of(finding)
    return finding


def hosts_ended_now(hosts: list[HostSummary], meta: dict[str, Any]) -> list[HostSummary]:
    """A stored summary's hosts with each one's status as the run's meta says now."""
    status = {str(h.get("host")): h.get("status") for h in meta.get("hosts", [])}
    for host in hosts:
        host.status = status.get(str(host.host), host.status)
    return hosts


def _compute(run: Run) -> RunReport:
    """Every rule on the run's tables, and the summary: the only place the rules are loaded."""
    from tpuscope.detect import detect
    from tpuscope.detect.pod_tables import run_tables

    tables = run_tables(run)  # a pod's steps stay in its parts (detect/pod_tables.py)
    add_program_folders(tables.meta)  # whose lines are the user's: the program's, not this one's
    findings = detect(tables)
    return RunReport(summary=_summary(tables, findings), findings=findings)


def current(run: Run) -> RunReport:
    """The run's analysis as written, or (a run still going, one changed since, or one from an
    older tpuscope) computed now without writing: readers never write (a run in a read-only
    place, or checked out of git, stays as it is). A report computed now says so in its
    summary (`analysed_now`: why the stored one was not used)."""
    stored = _stored(run)
    if stored is not None:
        return stored
    report = _compute(run)
    report.summary.analysed_now = _why_not_stored(run)
    return report


def _why_not_stored(run: Run) -> str:
    """Why a read computed the analysis instead of reading it, in words."""
    meta = run.meta
    if meta.get("status") == "running":
        return "the run is still going"
    written = run.analysis_written()
    if written is None:
        return "the run has no stored analysis"
    if written.get("analysis_version") != ANALYSIS_VERSION:
        return "its stored analysis is from another version of tpuscope"
    return "its tables changed since its analysis was stored"


def analyze(run: Run, redetect: bool = True) -> RunReport:
    """Findings and summary computed and written into the run (its end, an import,
    `show --reanalyze`); without redetect, the stored analysis when current, else one computed
    now and not written (current())."""
    if not redetect:
        return current(run)
    digest = run.parts_digest()  # the parts this analysis is computed from
    report = _compute(run)
    report.summary.parts_digest = digest
    run.write_findings(report.findings)
    run.write_analysis(report.summary.to_dict())
    return report
