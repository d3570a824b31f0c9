"""`tpuscope diff A B` rendered: a rich table on the terminal, Markdown for a CI comment.

The figures come from tpuscope.analyze.compare (pure); this module only reads the two
runs' analyses (tpuscope.detect.run_analysis.current: the one analysis written into each run)
and words the result.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from tpuscope.analyze.compare import STEADY, Side, judged_walls
from tpuscope.detect.run_analysis import current
from tpuscope.report.console import where
from tpuscope.report.fit import Col, fits, grid
from tpuscope.store import Run


def side_of(run: Run) -> Side:
    """A run as the comparison takes it: its analysis, its judged steps' wall times and compiles."""
    report = current(run)
    wall, compiles = judged_walls(run.steps, int(report.summary.warmup))
    return Side(
        summary=report.summary, findings=report.findings, step_ns=wall, step_compiles=compiles
    )


def _device(side: dict[str, Any]) -> str:
    """'torch_xla CPU', or what was not recorded in words."""
    return (
        " ".join(str(v) for v in (side.get("backend"), side.get("device_kind")) if v)
        or "not recorded"
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f} ms"


def ratio_text(st: dict[str, Any]) -> str:
    """'x0.5 (95% CI x0.4..x0.6), faster': B/A with its interval and what it means."""
    if st.get("ratio") is None:
        return str(st.get("note", "no ratio"))
    ratio = f"x{st['ratio']:.3g}"
    if not st.get("ratio_ci"):
        return f"{ratio} ({st.get('note')})"
    lo, hi = st["ratio_ci"]
    return f"{ratio} ({round(100 * st['confidence'])}% CI x{lo:.3g}..x{hi:.3g}), {st['verdict']}"


def difference_text(st: dict[str, Any]) -> str:
    """'-2.00 ms (95% CI -2.50..-1.50 ms)': B - A with its interval."""
    if st.get("diff_ms") is None:
        return ""
    if not st.get("diff_ci_ms"):
        return f"{st['diff_ms']:+,.2f} ms"
    lo, hi = st["diff_ci_ms"]
    return (
        f"{st['diff_ms']:+,.2f} ms ({round(100 * st['confidence'])}% CI {lo:+,.2f}..{hi:+,.2f} ms)"
    )


def steps_word(st: dict[str, Any]) -> str:
    """'steady' when the judged steps that compiled were left out, else 'judged'."""
    return "steady" if st.get("steps") == STEADY else "judged"


def _compiled_row(st: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """How many judged steps compiled, and whether the step time left them out (when known)."""
    if st.get("a_compiled") is None or st.get("b_compiled") is None:
        return []
    fate = (
        "left out of the step time"
        if st.get("steps") == STEADY
        else "kept in the step time (too few steps without a compile)"
    )
    return [("judged steps that compiled", str(st["a_compiled"]), str(st["b_compiled"]), fate)]


def _delta(c: dict[str, float], digits: int = 0) -> str:
    fmt = f"{{:+,.{digits}f}}"
    return "same" if c["delta"] == 0 else fmt.format(c["delta"])


def rows(diff: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, change) rows shared by the terminal and Markdown tables."""
    a, b, st, fb = diff["a"], diff["b"], diff["step_time"], diff["fallbacks"]
    out = [
        ("run", str(a["run_id"]), str(b["run_id"]), ""),
        ("device", _device(a), _device(b), ""),
        ("judged steps", str(a["steps_judged"]), str(b["steps_judged"]), ""),
        *_compiled_row(st),
        (
            f"median {steps_word(st)} step time",
            _ms(st["a_median_ms"]),
            _ms(st["b_median_ms"]),
            ratio_text(st),
        ),
        ("step time B - A", "", "", difference_text(st)),
        (
            "compiles",
            str(diff["compiles"]["a"]),
            str(diff["compiles"]["b"]),
            _delta(diff["compiles"]),
        ),
        *_compile_rows(diff),
        (
            "recompiles",
            str(diff["recompiles"]["a"]),
            str(diff["recompiles"]["b"]),
            _delta(diff["recompiles"]),
        ),
        (
            "recompile time",
            f"{diff['recompile_s']['a']:.2f} s",
            f"{diff['recompile_s']['b']:.2f} s",
            _delta(diff["recompile_s"], 2) + (" s" if diff["recompile_s"]["delta"] else ""),
        ),
        (
            "CPU fallback calls / step",
            f"{fb['a_per_step']:.2f}",
            f"{fb['b_per_step']:.2f}",
            _delta({"delta": fb["b_per_step"] - fb["a_per_step"]}, 2),
        ),
    ]
    return out


def cache_words(cache: dict[str, Any] | None) -> str:
    """The persistent compilation cache of a run in a few words: 'on: 17 loaded', 'off'."""
    if not cache:
        return "not recorded"
    if not cache.get("on"):
        return "off"
    said = [
        f"{cache[k]} {word}"
        for k, word in (
            ("hits", "loaded"),
            ("misses", "written"),
            ("unwritten", "not written"),
            ("load_failures", "failed to load"),
        )
        if cache.get(k)
    ]
    return "on" + (f": {', '.join(said)}" if said else "")


def _compile_rows(diff: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Compile seconds per run side by side, with the run's wall time and its cache (issue 41);
    a diff written before these keys has the compile time only."""
    c = diff["compile_s"]
    out = [("compile time", f"{c['a']:.2f} s", f"{c['b']:.2f} s", _seconds_change(c))]
    wall = diff.get("run_wall_s")
    if wall is not None:
        out.append(
            ("run wall time", f"{wall['a']:.2f} s", f"{wall['b']:.2f} s", _seconds_change(wall))
        )
        share_a, share_b = (f"{100 * c[k] / wall[k]:.0f}%" if wall[k] else "-" for k in ("a", "b"))
        out.append(("compile time / run wall time", share_a, share_b, ""))
    cache = diff.get("compile_cache")
    if cache is not None:
        out.append(
            ("persistent compile cache", cache_words(cache["a"]), cache_words(cache["b"]), "")
        )
    return out


def _seconds_change(c: dict[str, float]) -> str:
    if not c["delta"]:
        return "same"
    return f"{c['delta']:+,.2f} s" + (f" ({100 * c['delta'] / c['a']:+.0f}%)" if c["a"] else "")


def _finding_text(f: dict[str, Any]) -> str:
    sev = (
        f"{f['a_severity']} -> {f['b_severity']}"
        if f["a_severity"] and f["b_severity"]
        else f["b_severity"] or f["a_severity"]
    )
    cost = " -> ".join(f"{c:.3f} s" for c in (f["a_cost_s"], f["b_cost_s"]) if c is not None)
    return f"{f['rule']} ({sev}, {cost}) at {where(f['location'])}: {f['title']}"


def render(diff: dict[str, Any], console: Console) -> None:
    """The comparison on the terminal."""
    cols = (
        Col("figure", whole=True),
        Col("A", whole=True),
        Col("B", whole=True),
        Col("B vs A", long=True),
    )
    table = grid("tpuscope diff: B against A", cols, rows(diff), console.width)
    if fits(table):
        console.print(table)
    else:  # too narrow for the run ids whole: one line a figure, A and B named
        console.print("tpuscope diff: B against A", style="italic")
        for figure, a, b, change in rows(diff):
            line = (
                f"{figure}: A {a or '-'}, B {b or '-'}" + (f"; B vs A {change}" if change else "")
                if a or b
                else f"{figure}: {change}"
            )
            console.print(line, soft_wrap=True, markup=False)
    console.print(f"[dim]interval: {diff['step_time']['method']}[/dim]", soft_wrap=True)
    for kind in ("new", "gone", "changed"):
        items = diff["findings"][kind]
        console.print(f"[bold]findings {kind}[/bold] ({len(items)})")
        for f in items:
            console.print(f"  {_finding_text(f)}", soft_wrap=True, markup=False)
    console.print(f"findings the same: {len(diff['findings']['same'])}")


def markdown(diff: dict[str, Any], failed: list[str] | None = None) -> str:
    """The comparison as Markdown (a table and the findings new / gone / changed), for a CI comment."""
    lines = ["### tpuscope diff", "", "| | A | B | B vs A |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(cell.replace('|', '/') for cell in row)} |" for row in rows(diff)]
    lines += ["", f"Interval: {diff['step_time']['method']}.", ""]
    for kind in ("new", "gone", "changed"):
        items = diff["findings"][kind]
        lines.append(f"**Findings {kind}** ({len(items)})" + ("" if items else ": none"))
        lines += [f"- {_finding_text(f)}" for f in items]
        lines.append("")
    lines.append(f"Findings the same: {len(diff['findings']['same'])}.")
    if failed is not None:
        lines += ["", f"**Regression:** {'; '.join(failed)}" if failed else "No regression."]
    return "\n".join(lines) + "\n"


def markdown_text(diff: dict[str, Any]) -> str:
    """`diff --markdown`: the comparison with its "regression" verdict (None: none was asked)."""
    return markdown(diff, diff.get("regression"))
