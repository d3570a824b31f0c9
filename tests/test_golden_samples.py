"""Golden tests: the detectors on the real runs in sample_traces/ give their expected findings.

Each scenario folder is a run captured with `tpuscope run` on an example (the command
is in its expected_findings.json). No torch_xla run is needed: this is the fast,
exact check of the detectors on real tables. Runs in a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_tpuscope
from tpuscope.analyze.contract import EVIDENCE, evidence_of
from tpuscope.detect import RunTables, detect
from tpuscope.detect.registry import order
from tpuscope.schema import Finding, plain_evidence
from tpuscope.store import Run

SAMPLES = ROOT / "sample_traces"
MY_RULES = ("recompile", "cpu_fallback", "host_sync", "op_by_op")
SCENARIOS = sorted(
    p.parent.name
    for p in SAMPLES.glob("*/expected_findings.json")
    if "expected" in json.loads(p.read_text())
)
SAMPLE_BUDGET_BYTES = 5 * 1024 * 1024


def expected(scenario: str) -> dict[str, Any]:
    return json.loads((SAMPLES / scenario / "expected_findings.json").read_text())


def findings(scenario: str) -> list[Finding]:
    return detect(RunTables.from_run(Run(SAMPLES / scenario)))


def contains(actual: Any, wanted: Any) -> bool:
    """wanted is a subset of actual: dict keys recursively, other values equal."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in wanted.items()
        )
    return actual == wanted


def matches(finding: Finding, want: dict[str, Any]) -> bool:
    checks = [
        finding.rule == want["rule"],
        "severity" not in want or finding.severity == want["severity"],
        "location_endswith" not in want
        or (finding.location or "").endswith(want["location_endswith"]),
        "step_runs" not in want or finding.step_runs == want["step_runs"],
        contains(plain_evidence(finding.evidence), want.get("evidence", {})),
        want.get("title_contains", "") in finding.title,
        want.get("detail_contains", "") in finding.detail,
        want.get("fix_contains", "") in finding.fix,
    ]
    return all(checks)


def test_there_are_scenarios() -> None:
    assert {"clean_static", "shape_churn", "recompile_storm", "fallback_host_sync"} <= set(
        SCENARIOS
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expected_findings(scenario: str) -> None:
    spec = expected(scenario)
    got = findings(scenario)
    for want in spec["expected"]:
        candidates = [f for f in got if f.rule == want["rule"]]
        assert any(matches(f, want) for f in candidates), (
            f"{scenario}: no finding matches {want}; {want['rule']} findings: "
            + json.dumps([f.to_dict() for f in candidates], default=str)[:3000]
        )
    for rule in spec.get("absent_rules", []):
        assert not [f.title for f in got if f.rule == rule], f"{scenario}: unexpected {rule}"
    for rule, count in spec.get("count", {}).items():
        assert sum(f.rule == rule for f in got) == count


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_findings_are_well_formed_and_ordered_by_severity_then_cost(scenario: str) -> None:
    got = findings(scenario)
    assert [order(f) for f in got] == sorted(order(f) for f in got)
    for finding in (f for f in got if f.rule in MY_RULES):
        assert finding.title and finding.detail and finding.fix
        assert finding.cost_s >= 0 and "Cost" in finding.detail
        assert finding.location is None or ".py:" in finding.location
        json.dumps(finding.to_row())  # evidence must serialise for the findings table
    for (
        finding
    ) in got:  # each rule makes its contract record (analyze/contract.py), every key declared
        record = finding.evidence
        assert type(record) is EVIDENCE[finding.rule] and not record.undeclared, finding.rule
        stored = Finding.from_row(finding.to_row())  # through the findings table and back
        assert evidence_of(stored).to_dict() == record.to_dict()


def test_clean_run_has_no_recompile_churn_or_fallback() -> None:
    assert not [f.title for f in findings("clean_static") if f.rule in MY_RULES]


def test_the_report_leads_with_the_most_severe_finding_and_its_fix(tmp_path: Path) -> None:
    import shutil

    copy = shutil.copytree(SAMPLES / "shape_churn", tmp_path / "shape_churn")  # --reanalyze writes
    proc = run_tpuscope(
        "show", str(copy), "--json", "--reanalyze", env={"TPUSCOPE_STORE": str(tmp_path)}
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    first = report["findings"][0]
    assert first["rule"] == "recompile" and "pad dim 1 of arg 0" in first["fix"].lower()
    assert set(first) >= {
        "rule",
        "severity",
        "title",
        "detail",
        "fix",
        "location",
        "cost_s",
        "step_runs",
        "step_count",
        "evidence",
    }


def test_sample_traces_stay_small() -> None:
    size = sum(p.stat().st_size for p in SAMPLES.rglob("*") if p.is_file())
    assert size < SAMPLE_BUDGET_BYTES, f"sample_traces is {size / 2**20:.1f} MB"


def test_samples_are_real_runs_of_the_examples() -> None:
    for scenario in SCENARIOS:
        meta = Run(SAMPLES / scenario).meta
        command = expected(scenario)["captured_with"]
        assert meta["processes"] and meta["processes"][0]["backend"] == "torch_xla"
        script = next(a for a in meta["argv"] if a.endswith(".py"))
        assert f"examples/{Path(script).name}" in command and meta["status"] == "finished"


# -- live: the same example, run again now ----------------------------------------------------
@pytest.mark.slow
def test_live_rerun_matches_the_sample(example_run) -> None:
    """Re-run examples/host_sync_fallback.py under `tpuscope run --deep`: the fresh run must give
    the sample's expected findings, with call sites traced live and per-graph shapes read."""
    run_dir, proc = example_run("host_sync_fallback.py", tpuscope_args=("--deep",))
    assert proc.returncode == 0, proc.stderr
    run = Run(run_dir)
    got = detect(RunTables.from_run(run))
    for want in expected("fallback_host_sync")["expected"]:
        assert any(matches(f, want) for f in got), want
    # site tracing splits counts by call site but never changes torch_xla's totals
    counters = run.metrics[
        (run.metrics["kind"] == "counter") & run.metrics["name"].str.startswith("aten::")
    ]
    assert (
        run.fallbacks.groupby("op")["count"].sum().to_dict()
        == counters.groupby("name")["count"].sum().to_dict()
    )
    sites = run.fallbacks.dropna(subset=["location"])
    assert {
        (op, Path(loc).name) for op, loc in zip(sites["op"], sites["location"], strict=True)
    } >= {
        ("aten::nonzero", "host_sync_fallback.py:23"),
        ("aten::_local_scalar_dense", "host_sync_fallback.py:49"),
    }
    reads = run.table("call_sites")
    assert ("item", "host_sync_fallback.py:49") in {
        (n, Path(loc).name) for n, loc in zip(reads["name"], reads["location"], strict=True)
    }
    # every compile got its parameters from the HLO dump, paired by count
    shaped = run.compiles.dropna(subset=["input_shapes"])
    assert (
        len(shaped) == len(run.compiles)
        and (shaped["num_inputs"] == shaped["input_shapes"].map(len)).all()
    )


@pytest.mark.slow
def test_live_clean_run_has_no_findings(example_run) -> None:
    """The static transformer (the same run the dashboard tests use) after warm-up: nothing to fix."""
    run_dir, proc = example_run(
        "train_transformer.py",
        "--steps",
        "5",
        "--d-model",
        "32",
        "--layers",
        "1",
        "--vocab",
        "64",
        "--seq",
        "16",
    )
    assert proc.returncode == 0, proc.stderr
    assert not [f.title for f in detect(RunTables.from_run(Run(run_dir))) if f.rule in MY_RULES]
    compiles = Run(run_dir).compiles  # the default mode has every graph's input shapes too
    assert compiles["input_shapes"].notna().all() and (run_dir / "hlo").exists() is False
