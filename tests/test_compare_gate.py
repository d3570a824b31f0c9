"""The pure halves of CI gating on hand-built analyses: run limits (analyze/gate.py) and
`tpuscope diff` (analyze/compare.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import ROOT
from tpuscope.analyze.compare import STEADY, Side, compare, findings_delta, regressions, step_time
from tpuscope.analyze.gate import (
    EXIT_LIMIT,
    EXIT_UNJUDGED,
    Policy,
    exit_status,
    parse_rules,
    reasons,
)
from tpuscope.schema import Finding

MS = 1e6


def finding(
    rule: str = "recompile",
    severity: str = "high",
    location: str | None = "/src/train.py:56",
    cost_s: float = 1.0,
    **evidence: object,
) -> Finding:
    return Finding(
        rule=rule,
        severity=severity,
        title=f"{rule} at {location}",
        detail="",
        fix="",
        location=location,
        cost_s=cost_s,
        evidence=dict(evidence),
    )


def summary(
    recompiles: int = 0, fallbacks: dict[str, int] | None = None, steps: int = 10, **extra: object
) -> dict:
    ops = [{"op": op, "count": n, "per_step": n / steps} for op, n in (fallbacks or {}).items()]
    return {
        "run_id": "r",
        "name": "r",
        "steps": steps,
        "steps_judged": steps - 2,
        "compiles": 1 + recompiles,
        "recompiles": recompiles,
        "compile_s": 1.0,
        "recompile_s": 0.5 * recompiles,
        "fallback_ops": ops,
        **extra,
    }


# --- run limits ------------------------------------------------------------------------


def test_recompile_and_fallback_limits_count_as_the_analysis_does() -> None:
    s = summary(recompiles=3, fallbacks={"aten::nonzero": 12, "aten::unique2": 1})
    assert reasons(s, [], Policy(max_recompiles=3)) == []
    assert reasons(s, [], Policy(max_recompiles=2)) == ["3 recompiles > --max-recompiles 2"]
    [fallback] = reasons(s, [], Policy(max_fallbacks=0))
    assert fallback.startswith("13 CPU fallback calls > --max-fallbacks 0 (aten::nonzero x12")
    assert reasons(s, [], Policy(max_fallbacks=1, allow_fallbacks=("nonzero",))) == []
    assert reasons(s, [], Policy(max_fallbacks=0, allow_fallbacks=("aten::*",))) == []
    assert reasons(s, [], Policy(max_fallbacks=0, allow_fallbacks=("unique*", "nonzero"))) == []
    assert reasons(summary(), [], Policy(max_recompiles=0, max_fallbacks=0)) == []


def test_fail_on_names_rules_and_a_minimum_severity() -> None:
    found = [
        finding(),
        finding("cpu_fallback", "medium", op="aten::nonzero"),
        finding("host_sync", "low"),
    ]
    assert reasons(summary(), found, Policy(fail_on=("host_sync",))) == [
        "host_sync (low) at train.py:56"
    ]
    assert reasons(summary(), found, Policy(fail_on=("host_sync",), fail_severity="medium")) == []
    assert reasons(
        summary(), found, Policy(fail_on=parse_rules("all"), fail_severity="medium")
    ) == ["recompile (high) at train.py:56", "cpu_fallback (medium) at train.py:56"]
    assert parse_rules("recompile, cpu_fallback,recompile") == ("recompile", "cpu_fallback")
    with pytest.raises(ValueError, match="unknown rule shape"):
        parse_rules("recompile,shape")
    assert not Policy().active and Policy(max_fallbacks=0).active


@pytest.mark.parametrize(
    ("program", "failed", "judged", "status"),
    [
        (0, ["x"], True, EXIT_LIMIT),
        (0, [], True, 0),
        (1, ["x"], True, 1),
        (1, [], True, 1),
        (-15, ["x"], True, -15),
        (0, [], False, EXIT_UNJUDGED),
        (2, [], False, 2),
    ],
)
def test_the_program_status_always_wins(
    program: int, failed: list[str], judged: bool, status: int
) -> None:
    assert exit_status(program, failed, judged) == status


# --- diff ------------------------------------------------------------------------------


def steps_ms(median: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * MS * (1 + 0.05 * rng.standard_normal(n)))


def test_same_distribution_is_no_clear_change_and_the_interval_is_reproducible() -> None:
    a, b = steps_ms(20, 40, 1), steps_ms(20, 300, 2)  # different lengths
    st = step_time(a, b)
    assert st["verdict"] == "no clear change"
    assert st["ratio_ci"][0] < 1 < st["ratio_ci"][1]
    assert st["diff_ci_ms"][0] < 0 < st["diff_ci_ms"][1]
    assert step_time(a, b) == st  # fixed seed
    assert "bootstrap" in st["method"]


def test_a_slower_b_is_a_regression_only_past_the_threshold() -> None:
    a, b = (
        Side(summary(), step_ns=steps_ms(20, 30, 1)),
        Side(summary(), step_ns=steps_ms(40, 30, 2)),
    )
    diff = compare(a, b)
    st = diff["step_time"]
    assert st["verdict"] == "slower" and st["ratio"] == pytest.approx(2, rel=0.1)
    assert st["ratio_ci"][0] > 1.5 and st["diff_ms"] == pytest.approx(20, rel=0.15)
    assert regressions(diff, 5) and regressions(diff, 5)[0].startswith("median judged step time +")
    assert regressions(diff, 200) == []
    assert regressions(compare(b, a), 0) == []  # faster is never a regression


def test_too_few_steps_give_no_interval_and_no_step_time_verdict() -> None:
    diff = compare(Side(summary(), step_ns=[10 * MS]), Side(summary(), step_ns=[90 * MS, 95 * MS]))
    st = diff["step_time"]
    assert (
        st["ratio"] == pytest.approx(9.25) and st["ratio_ci"] is None and st["verdict"] == "unknown"
    )
    assert regressions(diff, 5) == []
    assert (
        compare(Side(summary()), Side(summary()))["step_time"]["note"] == "a run has no judged step"
    )


def test_findings_are_matched_by_rule_location_and_op() -> None:
    a = [
        finding(),
        finding("cpu_fallback", "medium", op="aten::nonzero", cost_s=0.1),
        finding("host_sync", "medium", cost_s=0.010),
        finding("op_by_op", "low", location=None),
    ]
    b = [
        finding(cost_s=1.1),  # within 25%: the same
        finding(
            "cpu_fallback", "medium", op="aten::unique2", cost_s=0.1
        ),  # same line, another op: new
        finding("host_sync", "high", cost_s=0.5),  # severity changed
        finding("tensorcore_underuse", "medium", location="/src/model.py:3"),
    ]
    delta = findings_delta(a, b)
    assert [(f["rule"], f["b_severity"]) for f in delta["new"]] == [
        ("cpu_fallback", "medium"),
        ("tensorcore_underuse", "medium"),
    ]
    assert sorted(f["rule"] for f in delta["gone"]) == ["cpu_fallback", "op_by_op"]
    assert [(f["a_severity"], f["b_severity"]) for f in delta["changed"]] == [("medium", "high")]
    assert [f["rule"] for f in delta["same"]] == ["recompile"]
    cost_only = findings_delta([finding(cost_s=1.0)], [finding(cost_s=2.0)])
    assert len(cost_only["changed"]) == 1
    # no location: matched by rule and order, not by the title's numbers
    whole = [
        finding("op_by_op", "low", location=None),
        finding("op_by_op", "medium", location=None),
    ]
    retitled = [Finding(**{**f.to_dict(), "title": f.title + " (12 per step)"}) for f in whole]
    assert len(findings_delta(whole, retitled)["same"]) == 2


def test_new_or_newly_high_findings_are_regressions() -> None:
    steps = steps_ms(20, 10, 1)
    base = Side(summary(), [finding("host_sync", "medium")], steps)
    worse = Side(
        summary(),
        [finding("host_sync", "high"), finding("cpu_fallback", "high", op="aten::nonzero")],
        steps,
    )
    assert regressions(compare(base, worse), 5) == [
        "new high-severity cpu_fallback at train.py:56",
        "now high-severity host_sync at train.py:56",
    ]
    assert regressions(compare(worse, worse), 5) == []
    assert (
        regressions(compare(base, Side(summary(), [finding("host_sync", "low")], steps)), 5) == []
    )


def test_compiles_and_fallback_rates_per_op() -> None:
    a = Side(summary(recompiles=5, fallbacks={"aten::nonzero": 12}, steps=4))
    b = Side(summary(fallbacks={"aten::unique2": 10}, steps=100))
    diff = compare(a, b)
    assert diff["recompiles"] == {"a": 5, "b": 0, "delta": -5}
    assert diff["compiles"]["delta"] == -5
    fb = diff["fallbacks"]
    assert (fb["a_per_step"], fb["b_per_step"]) == (3.0, 0.1)
    assert [(r["op"], r["a_count"], r["b_count"]) for r in fb["ops"]] == [
        ("aten::nonzero", 12, 0),
        ("aten::unique2", 0, 10),
    ]


# -- the steady step time: judged steps that compiled are left out (session 11) -------------------
def test_steps_that_compiled_are_left_out_and_counted() -> None:
    steady_a, steady_b = steps_ms(20, 7, 1), steps_ms(10, 7, 2)
    a = Side(summary(), step_ns=[40_000 * MS] * 3 + steady_a, step_compiles=[1] * 3 + [0] * 7)
    b = Side(summary(), step_ns=steady_b + [40_000 * MS], step_compiles=[0] * 7 + [2])
    st = compare(a, b)["step_time"]
    assert st == {
        **step_time(steady_a, steady_b, kind="judged steps without a compile"),
        "steps": STEADY,
        "a_compiled": 3,
        "b_compiled": 1,
        "a_left_out": 3,
        "b_left_out": 1,
    }
    assert st["verdict"] == "faster" and st["diff_ci_ms"][0] > -15  # not +-40 s wide
    assert regressions(compare(b, a), 5)[0].startswith("median steady step time +")


def test_too_few_steps_without_a_compile_keep_them_all_and_say_so() -> None:
    a = Side(summary(), step_ns=steps_ms(20, 6, 1), step_compiles=[1, 1, 1, 1, 0, 0])
    b = Side(summary(), step_ns=steps_ms(10, 6, 2), step_compiles=[0] * 6)
    st = compare(a, b)["step_time"]
    assert st["a_steps"] == 6 and st["a_left_out"] == 0 and st["a_compiled"] == 4
    assert st["steps"] == "all judged steps" and "steps that compiled are kept" in st["note"]
    unknown = compare(Side(summary(), step_ns=steps_ms(20, 6, 1)), b)["step_time"]
    assert unknown["a_compiled"] is None and unknown["a_steps"] == 6  # not given: nothing left out


def test_golden_churn_samples_compare_their_steady_steps() -> None:
    """The two 10-step churn samples: 4 judged steps of each compiled (40-70 s each), which
    made the interval of B - A about +-46 s; the steady steps give a narrow one."""
    from tpuscope.report.diff import rows, side_of
    from tpuscope.store import Run

    a, b = (
        side_of(Run(ROOT / "sample_traces" / name))
        for name in ("shape_churn", "shape_churn_default")
    )
    diff = compare(a, b)
    st = diff["step_time"]
    assert (st["a_steps"], st["a_left_out"], st["b_steps"], st["b_left_out"]) == (6, 4, 6, 4)
    assert st["verdict"] == "faster" and -200 < st["diff_ci_ms"][0] < st["diff_ci_ms"][1] < 0
    assert ("judged steps that compiled", "4", "4", "left out of the step time") in rows(diff)
    assert any(row[0] == "median steady step time" for row in rows(diff))
