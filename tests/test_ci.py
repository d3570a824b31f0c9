"""CI gating end to end on real torch_xla (CPU): `tpuscope run --fail-on / --max-*` exit
statuses against the program's own, and `tpuscope diff` of a run against its fixed version."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, run_tpuscope
from tpuscope.store import Run

GATE = ROOT / "tests" / "programs" / "gate.py"
CHURN = (str(EXAMPLES / "variable_length.py"), "--steps", "5")
FIXED = (*CHURN, "--buckets", "64")  # one padded length: no recompile
FALLBACK = (str(EXAMPLES / "host_sync_fallback.py"), "--steps", "4")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory):
    """gated(name, program args, tpuscope options) -> (run folder, CompletedProcess), once per name."""
    store = tmp_path_factory.mktemp("ci")
    made: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = {}

    def get(
        name: str, program: tuple[str, ...], *options: str
    ) -> tuple[Path, subprocess.CompletedProcess[str]]:
        if name not in made:
            proc = run_tpuscope(
                "run",
                "--store",
                str(store),
                "--name",
                name,
                "--quiet",
                *options,
                "python",
                *program,
            )
            made[name] = (next(p for p in store.iterdir() if p.name.startswith(f"{name}-")), proc)
        return made[name]

    get.store = store  # type: ignore[attr-defined]
    return get


def lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("tpuscope: ")]


def analysis(run_dir: Path) -> dict:
    return json.loads((run_dir / "analysis.json").read_text())


def test_a_finding_after_a_clean_exit_is_exit_3_with_one_line_why(gated) -> None:
    run_dir, proc = gated("churn", CHURN, "--fail-on", "recompile,cpu_fallback")
    assert proc.returncode == 3, proc.stderr
    assert (
        json.loads((run_dir / "meta.json").read_text())["exit_code"] == 0
    )  # the program's own, recorded
    assert lines(proc) == ["tpuscope: exit 3: recompile (high) at variable_length.py:56"]


def test_the_fixed_run_passes_the_same_limits(gated) -> None:
    run_dir, proc = gated(
        "fixed", FIXED, "--fail-on", "all", "--max-recompiles", "0", "--max-fallbacks", "0"
    )
    assert proc.returncode == 0, proc.stderr
    assert analysis(run_dir)["recompiles"] == 0 and lines(proc) == []


def test_the_program_failing_keeps_its_status(gated) -> None:
    run_dir, proc = gated("exit1", (str(GATE), "3", "exit", "1"), "--fail-on", "cpu_fallback")
    assert proc.returncode == 1
    # the severity is the fallback's measured share of the step time (low or medium by load)
    [card] = [f for f in Run(run_dir).findings_list() if f.rule == "cpu_fallback"]
    assert lines(proc) == [
        f"tpuscope: limits exceeded too (cpu_fallback ({card.severity}) at gate.py:18); "
        "the status stays the program's (exit status 1)"
    ]


def test_death_by_a_signal_keeps_the_signal(gated) -> None:
    _, proc = gated(
        "sigterm", (str(GATE), "3", "sigterm"), "--fail-on", "cpu_fallback", "--max-fallbacks", "0"
    )
    assert proc.returncode == -signal.SIGTERM
    assert "killed by SIGTERM" in lines(proc)[0]


def test_max_fallbacks_counts_calls_not_value_reads(gated) -> None:
    run_dir, proc = gated("fallback", FALLBACK, "--max-recompiles", "2", "--max-fallbacks", "0")
    summary = analysis(run_dir)
    assert summary["value_reads"] > 0  # .item() every step: a host sync, never a fallback
    calls = sum(op["count"] for op in summary["fallback_ops"])
    assert proc.returncode == 3
    [line] = lines(proc)
    assert f"{calls} CPU fallback calls > --max-fallbacks 0 (aten::nonzero x{calls})" in line
    assert ("--max-recompiles" in line) == (summary["recompiles"] > 2)


def test_allowed_fallbacks_pass(gated) -> None:
    _, proc = gated("allowed", FALLBACK, "--max-fallbacks", "0", "--allow-fallbacks", "nonzero")
    assert proc.returncode == 0, proc.stderr


def test_bad_rule_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_tpuscope(
        "run", "--store", str(tmp_path), "--fail-on", "recompiles", "python", "-c", "0"
    )
    assert proc.returncode == 2 and "unknown rule recompiles" in proc.stderr
    assert not list(tmp_path.iterdir())


def diff(gated, *args: str) -> subprocess.CompletedProcess[str]:
    churn, fixed = (
        gated("churn", CHURN, "--fail-on", "recompile,cpu_fallback")[0],
        gated("fixed", FIXED, "--fail-on", "all", "--max-recompiles", "0", "--max-fallbacks", "0")[
            0
        ],
    )
    names = {"A": churn.name, "B": fixed.name}
    return run_tpuscope("diff", "--store", str(gated.store), *[names.get(a, a) for a in args])


def test_diff_json_reports_the_recompiles_gone_and_the_step_time_interval(gated) -> None:
    proc = diff(gated, "A", "B", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["recompiles"]["a"] >= 3 and out["recompiles"]["b"] == 0
    assert [(f["rule"], f["b_severity"]) for f in out["findings"]["gone"]] == [("recompile", None)]
    # compile_time (how fast this machine compiled each run) may come and go with the load
    assert [f for f in out["findings"]["new"] if f["rule"] != "compile_time"] == []
    assert out["regression"] is None
    st = out["step_time"]
    assert st["verdict"] == "faster" and st["ratio_ci"][1] < 1 and st["diff_ci_ms"][1] < 0
    assert "bootstrap" in st["method"]


def test_diff_markdown_and_the_regression_gate(gated) -> None:
    md = diff(gated, "A", "B", "--markdown", "--fail-on-regression", "5%")
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("### tpuscope diff\n")
    assert "| recompiles |" in md.stdout and "**Findings gone** (1)" in md.stdout
    assert "% CI x" in md.stdout and md.stdout.rstrip().endswith("No regression.")
    worse = diff(gated, "B", "A", "--fail-on-regression", "5")
    assert worse.returncode == 3
    assert "findings new (1)" in worse.stdout and "slower" in worse.stdout
    [line] = lines(worse)
    assert line.startswith("tpuscope: exit 3: regression: median judged step time +")
    assert "new high-severity recompile at variable_length.py:56" in line
