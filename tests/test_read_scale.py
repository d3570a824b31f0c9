"""Read paths that grow with what is shown, not with the run: step runs in findings, the
summaries the Runs page and `ls` read, the dashboard's caches at hundreds of runs.

The runs are synthetic (tests/synthetic.py: real Parquet in the store's schemas, a
fallback in every step after the second) and analysed by tpuscope's own analysis; every
expectation is read back from their tables. Speed itself is measured in
benchmarks/read_scale.py, not here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_tpuscope
from tpuscope.analyze.families import graph_families, process_backends, recompiles
from tpuscope.detect.run_analysis import analyze
from tpuscope.schema import Finding
from tpuscope.step_runs import MAX_RUNS, expand, runs_text, step_runs
from tpuscope.store import Run

STEPS = 20_000


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.synthetic import make_run

    store = tmp_path_factory.mktemp("long")
    return make_run(
        store,
        "long",
        steps=STEPS,
        trace_events=2_000,
        recompiles=40,
        metrics=True,
        parts=4,
        analyze=True,
    )


def test_step_runs_are_the_runs_of_consecutive_steps() -> None:
    steps = [9, 0, 1, 2, 5, 7, 8, 8, -1]  # unsorted, repeated, a whole-run row (-1)
    runs, count = step_runs(steps)
    assert runs == [[0, 2], [5, 5], [7, 9]] and count == 7
    assert expand(runs) == sorted(set(steps) - {-1})
    assert runs_text(runs, count) == "0-2, 5, 7-9"
    assert step_runs([]) == ([], 0)


def test_step_runs_are_capped_keeping_the_last_run() -> None:
    every_other = np.arange(0, 1000, 2)
    runs, count = step_runs(every_other)
    assert len(runs) == MAX_RUNS and count == 500
    assert runs[: MAX_RUNS - 1] == [[int(s), int(s)] for s in every_other[: MAX_RUNS - 1]]
    assert runs[-1] == [998, 998]
    assert runs_text(runs, count).endswith("... 998 (500 steps)")


def test_a_finding_round_trips_its_step_runs_through_the_store() -> None:
    runs, count = Finding.of_steps(range(2, 10**6))
    finding = Finding(
        "cpu_fallback", "high", "t", "d", "f", None, 1.0, step_runs=runs, step_count=count
    )
    row = Finding.from_row(finding.to_row())
    assert row.step_runs == [[2, 999_999]] and row.step_count == 999_998
    assert row.steps_text == "2-999999"


def test_findings_of_a_long_run_carry_ranges_that_match_its_tables(long_run: Path) -> None:
    run = Run(long_run)
    findings = {f.rule: f for f in run.findings_list()}
    fallbacks = run.fallbacks
    nonzero = fallbacks[fallbacks["op"] == "aten::nonzero"]["step"]
    fallback = findings["cpu_fallback"]
    assert fallback.step_runs == [[int(nonzero.min()), int(nonzero.max())]]
    assert fallback.step_count == nonzero.nunique() == STEPS - 2
    again = recompiles(
        graph_families(run.compiles, process_backends(run.meta))
    )  # the library's own rule
    recompiled = sorted(set(again["step"]))
    recompile = findings["recompile"]
    assert expand(recompile.step_runs) == recompiled and recompile.step_count == len(recompiled)
    stored = sum(p.stat().st_size for p in (long_run / "findings").glob("*.parquet"))
    assert stored < 64 * 1024  # no list of every step: the table stays a few KB


def test_show_json_gives_runs_not_every_step(long_run: Path) -> None:
    proc = run_tpuscope("show", str(long_run), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert by_rule["cpu_fallback"]["step_runs"] == [[2, STEPS - 1]]
    assert by_rule["cpu_fallback"]["step_count"] == STEPS - 2
    [op] = [o for o in report["summary"]["fallback_ops"] if o["op"] == "aten::nonzero"]
    assert op["step_runs"] == [[2, STEPS - 1]] and op["count"] == int(
        Run(long_run).fallbacks.query("op == 'aten::nonzero'")["count"].sum()
    )
    assert len(proc.stdout) < 200_000


def test_ls_json_carries_each_runs_analysis_brief(long_run: Path) -> None:
    proc = run_tpuscope("ls", "--store", str(long_run.parent), "--json")
    assert proc.returncode == 0, proc.stderr
    [listed] = json.loads(proc.stdout)
    written = json.loads((long_run / "analysis.json").read_text())
    assert listed["analysis"]["steps"] == written["steps"] == STEPS
    assert listed["analysis"]["findings_by_severity"] == written["findings_by_severity"]


def test_the_runs_page_of_more_runs_than_the_table_cache_reads_each_run_once(
    long_run: Path, tmp_path: Path
) -> None:
    from tpuscope.dashboards.data import StoreData

    store = tmp_path / "many"
    for i in range(80):  # more than the 64 tables the dashboard keeps
        shutil.copytree(long_run, store / f"copy-{i:03d}")
    data = StoreData(store)
    first = {run_id: data.summary(run_id) for run_id in data.run_ids()}
    again = {run_id: data.summary(run_id) for run_id in data.run_ids()}
    assert len(first) == 80 and all(again[k] is first[k] for k in first)  # cached, not re-read
    written = json.loads((long_run / "analysis.json").read_text())
    summary = first["copy-000"]
    assert summary["steps"] == written["steps"] and summary["recompiles"] == written["recompiles"]
    assert summary["findings"] == len(Run(store / "copy-000").findings_list())
    assert data.run_rows()[0]["steps"] == STEPS


def test_a_part_added_after_the_analysis_makes_the_summary_current_again(
    long_run: Path, tmp_path: Path
) -> None:
    import pyarrow as pa

    from tpuscope.dashboards.data import StoreData
    from tpuscope.schema import TABLES
    from tpuscope.store.parts import write_table_atomic

    copy = shutil.copytree(long_run, tmp_path / "store" / long_run.name)
    data = StoreData(copy.parent)
    assert data.summary(copy.name)["steps"] == STEPS
    last = Run(copy).steps.iloc[-1].to_dict()
    extra = pa.Table.from_pylist([{**last, "step": STEPS}], schema=TABLES["steps"])
    write_table_atomic(copy / "steps" / "part-late-000001.parquet", extra)
    assert data.summary(copy.name)["steps"] == STEPS + 1  # computed now: the analysis is stale
    analyze(Run(copy))
    assert data.summary(copy.name)["steps"] == STEPS + 1
