"""`show` of an ended run reads its stored analysis without loading the rules (issue 17): no
pandas, DuckDB or detector module at start-up, the same report as the rules give, and a stale
analysis (a part added since) or `--reanalyze` still runs them. Real runs from sample_traces/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "fallback_host_sync"
RULES = ("pandas", "duckdb", "tpuscope.detect.registry", "tpuscope.detect.cpu_fallback")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A copy of a sample run with findings, its analysis written now (current)."""
    target = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, target)
    analyze(Run(target))
    return target


def _show(run_dir: Path, *args: str) -> tuple[dict, set[str]]:
    """`show --json` as a subprocess: its report and the modules it imported."""
    cmd = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "tpuscope",
        "show",
        str(run_dir),
        "--json",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    return json.loads(proc.stdout), imported


def _add_part(run_dir: Path) -> None:
    """A steps part written after the analysis (renamed into its folder, as writers do), with
    analysis.json dated a second earlier so coarse file-system clocks cannot tie them."""
    steps = run_dir / "steps"
    first = sorted(steps.glob("part-*.parquet"))[0]
    tmp = steps / ".late.tmp"
    shutil.copyfile(first, tmp)
    os.replace(tmp, steps / "part-late.parquet")
    analysis = run_dir / "analysis.json"
    stamp = analysis.stat().st_mtime_ns - 1_000_000_000
    os.utime(analysis, ns=(stamp, stamp))


def test_show_of_a_current_analysis_loads_no_rule_and_says_what_the_rules_say(
    run_dir: Path,
) -> None:
    stored, imported = _show(run_dir)
    assert not imported & set(RULES), imported & set(RULES)
    assert stored["findings"], "the sample has findings to read back"
    recomputed, imported = _show(run_dir, "--reanalyze")
    assert set(RULES) <= imported
    assert recomputed == stored


def test_a_part_added_after_the_analysis_makes_it_stale_and_show_runs_the_rules(
    run_dir: Path,
) -> None:
    assert Run(run_dir).analysis is not None
    _add_part(run_dir)
    assert Run(run_dir).analysis is None
    report, imported = _show(run_dir)
    assert set(RULES) <= imported
    assert report["summary"]["steps"] > 0
    assert report["summary"]["analysed_now"] == "its tables changed since its analysis was stored"
    assert Run(run_dir).analysis is None  # reading never writes (issue 29): still stale


def test_an_analysis_written_after_compaction_is_current(run_dir: Path) -> None:
    _add_part(run_dir)
    assert Run(run_dir).compact("t") > 0
    assert Run(run_dir).analysis is None  # compaction replaced parts: judged stale
    analyze(Run(run_dir))
    assert Run(run_dir).analysis is not None
