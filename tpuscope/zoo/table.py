"""The zoo's table: one row per cell, a summary across the zoo, and the outputs (Markdown, JSON,
CSV, and Parquet that DuckDB queries).

A row says the cell's status and reason, what tpuscope measured (compiles, recompiles, fallback
ops with calls per step, value reads per step, step time) and whether its findings agree with
the cell's counters. The summary's headline is coverage beside the disagreement count.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

RULES = ("recompile", "cpu_fallback", "host_sync")


def load_records(store: str | Path) -> list[dict[str, Any]]:
    """Every cell record of the store, in (model type, scenario) order."""
    folder = Path(store) / "zoo" / "cells"
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    # a workaround cell (`train+batched_mm`) right after its default cell
    return sorted(records, key=lambda r: (r["model_type"], *str(r["scenario"]).partition("+")[::2]))


def load_earlier(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an earlier sweep's cells.csv (another machine's or session's store, which
    is not kept: docs/zoo/cells.csv), typed as row() makes them. A sweep split over machines
    or sessions is one table: the cells a store lacks come from here (`merged_rows`)."""
    with open(path, newline="") as handle:
        return [_typed(r) for r in csv.DictReader(handle)]


def _typed(r: dict[str, str]) -> dict[str, Any]:
    def number(key: str, kind: type = float) -> Any:
        return kind(float(r[key])) if r.get(key) not in (None, "") else None

    def flag(key: str) -> bool | None:
        return {"True": True, "False": False}.get(r.get(key) or "")

    return {
        **r,
        "compiles": number("compiles", int),
        "recompiles": number("recompiles", int),
        "reads_per_step": number("reads_per_step"),
        "executions_per_step": number("executions_per_step"),
        "step_ms": number("step_ms"),
        "seconds": number("seconds"),
        "clean": bool(flag("clean")),
        "agrees": flag("agrees"),
    }


def merged_rows(
    records: list[dict[str, Any]], earlier: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The store's rows, and the earlier rows of cells the store has not run, in table order."""
    rows = [row(r) for r in records]
    have = {(r["model_type"], r["scenario"]) for r in rows}
    rows += [r for r in earlier or [] if (r["model_type"], r["scenario"]) not in have]
    return sorted(rows, key=lambda r: (r["model_type"], *str(r["scenario"]).partition("+")[::2]))


def _row_ops(rows: list[dict[str, Any]]) -> Counter[str]:
    """Fallback ops named in rows' `fallback_ops` ("aten::isin.Tensor_Tensor (5.0/step at ...)")."""
    return Counter(
        part.split(" (")[0]
        for r in rows
        for part in str(r["fallback_ops"] or "").split("; ")
        if part
    )


def _per_step(calls: list[int]) -> float:
    return round(sum(calls) / len(calls), 1) if calls else 0.0


def row(record: dict[str, Any]) -> dict[str, Any]:
    """One flat row of the table (plain values: CSV, Parquet and Markdown take it as it is)."""
    truth, summary = record.get("truth") or {}, record.get("summary") or {}
    findings = record.get("findings") or []
    ok = record.get("status") == "ok" and "said" in record
    fallbacks = [
        f"{f['op']} ({f.get('per_step')}/step{' at ' + Path(f['sites'][0]).name if f.get('sites') else ''})"
        for f in findings
        if f.get("rule") == "cpu_fallback"
    ]
    return {
        "model_type": record["model_type"],
        "task": record.get("task"),
        "scenario": record["scenario"],
        "status": record.get("status"),
        "reason": record.get("reason") or "",
        "where": record.get("where") or "",
        "compiles": summary.get("compiles"),
        "recompiles": summary.get("recompiles"),
        "findings": ", ".join(sorted({str(f.get("rule")) for f in findings})),
        "fallback_ops": "; ".join(fallbacks),
        "tensorcore": ", ".join(sorted({str(k) for f in findings for k in f.get("kinds") or []})),
        "reads_per_step": _per_step(truth.get("reads") or []) if ok else None,
        "uncached_per_step": " ".join(str(n) for n in truth.get("uncached") or []),
        "executions_per_step": _per_step(truth.get("executions") or []) if ok else None,
        "step_ms": round(summary["step_time_p50_ms"], 1)
        if summary.get("step_time_p50_ms")
        else None,
        "clean": ok and not any(f.get("rule") in RULES for f in findings),
        "agrees": (not record.get("disagreements")) if ok else None,
        "disagreements": "; ".join(record.get("disagreements") or []),
        "seconds": record.get("seconds"),
        "run_id": record.get("run_id") or "",
    }


def summarize(
    records: list[dict[str, Any]], earlier: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Coverage, clean cells per scenario, the commonest fallback ops and failure reasons, and the
    disagreement count (the headline); `earlier`: rows of cells run in another store (their
    fallback ops are tpuscope's, counted with the counters' of this store's cells)."""
    rows = merged_rows(records, earlier)
    own = {(r["model_type"], r["scenario"]) for r in records}
    carried = _row_ops([r for r in rows if (r["model_type"], r["scenario"]) not in own])
    ran = [r for r in rows if r["status"] == "ok"]
    judged = [r for r in ran if r["agrees"] is not None]
    scenarios = sorted({r["scenario"] for r in rows})
    fallback_ops = Counter(
        f.get("op")
        for rec in records
        for f in rec.get("findings") or []
        if f.get("rule") == "cpu_fallback"
    )
    fallback_ops += carried
    truth_ops = (
        Counter(
            op for rec in records for op in (rec.get("expected") or {}).get("cpu_fallback") or []
        )
        + carried
    )
    reasons = Counter(_short_reason(r) for r in rows if r["status"] != "ok")
    return {
        "model_types": len({r["model_type"] for r in rows}),
        "cells": len(rows),
        "by_status": dict(Counter(r["status"] for r in rows)),
        "ran_per_scenario": {s: sum(r["scenario"] == s for r in ran) for s in scenarios},
        "clean_per_scenario": {
            s: sum(r["scenario"] == s and r["clean"] for r in ran) for s in scenarios
        },
        "findings_per_scenario": {
            s: dict(
                Counter(
                    f for r in ran if r["scenario"] == s for f in r["findings"].split(", ") if f
                )
            )
            for s in scenarios
        },
        "top_fallback_ops": fallback_ops.most_common(10),
        "top_fallback_ops_counters": truth_ops.most_common(10),
        "top_failure_reasons": reasons.most_common(10),
        "judged": len(judged),
        "disagreements": sum(not r["agrees"] for r in judged),
        "agreement_rate": round(sum(r["agrees"] for r in judged) / len(judged), 4)
        if judged
        else None,
        "cell_seconds": round(sum(r["seconds"] or 0 for r in rows)),
        "coverage": coverage([r for r in rows if r.get("task") in (None, "", "causal-lm")]),
        "coverage_by_task": coverage_by_task(rows),
    }


def coverage(
    rows: list[dict[str, Any]], scenarios: tuple[str, ...] = ("train", "generate")
) -> dict[str, int]:
    """Model types that ran every one of `scenarios`: with transformers' defaults, and counting a
    workaround cell (`train+batched_mm`) for a default that failed in the experts kernel."""
    types = {r["model_type"] for r in rows}
    ok = {(r["model_type"], r["scenario"]) for r in rows if r["status"] == "ok"}
    fixed = {(t, s.split("+")[0]) for t, s in ok if "+" in s}
    return {
        "model_types": len(types),
        "ran_all_default": sum(all((t, s) in ok for s in scenarios) for t in types),
        "ran_all_with_workaround": sum(
            all((t, s) in ok or (t, s) in fixed for s in scenarios) for t in types
        ),
    }


def coverage_by_task(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """coverage() per task of the table, over the default scenarios (train, generate) that fit
    the task (a masked LM has no generate): each family's share on its own terms."""
    from tpuscope.zoo.catalog import TASKS

    out: dict[str, dict[str, Any]] = {}
    for task in sorted({str(r.get("task") or "causal-lm") for r in rows}, key=list(TASKS).index):
        fits = tuple(s for s in ("train", "generate") if s in TASKS[task][1])
        mine = [r for r in rows if (r.get("task") or "causal-lm") == task]
        out[task] = {"scenarios": list(fits), **coverage(mine, fits)} if fits else {}
    return out


def _short_reason(r: dict[str, Any]) -> str:
    reason = r["reason"].split(":", 1)
    return f"{r['status']}: {reason[0]}" + (f" ({r['where']})" if r["where"] else "")


def markdown_summary(s: dict[str, Any]) -> str:
    lines = [
        f"**{s['disagreements']} disagreements** between tpuscope and the counters in {s['judged']} "
        f"judged cells (agreement {s['agreement_rate']}); coverage: {s['cells']} cells of "
        f"{s['model_types']} model types, by status {s['by_status']}. Causal-LM types that ran both `train` and "
        f"`generate`: {s['coverage']['ran_all_default']} with transformers' defaults, "
        f"{s['coverage']['ran_all_with_workaround']} counting the experts workaround "
        f"(`+batched_mm` cells).",
        *_task_lines(s.get("coverage_by_task") or {}),
        "",
        "| scenario | ran | clean | findings |",
        "|---|---|---|---|",
    ]
    for scenario, ran in s["ran_per_scenario"].items():
        lines.append(
            f"| {scenario} | {ran} | {s['clean_per_scenario'][scenario]} | "
            f"{s['findings_per_scenario'][scenario]} |"
        )
    lines += [
        "",
        "Most common CPU fallback ops (cells): "
        + (", ".join(f"`{op}` {n}" for op, n in s["top_fallback_ops_counters"]) or "none"),
        "",
        "Most common failure reasons: "
        + ("; ".join(f"{why} ({n})" for why, n in s["top_failure_reasons"]) or "none"),
    ]
    return "\n".join(lines)


def _task_lines(by_task: dict[str, dict[str, Any]]) -> list[str]:
    """One line per family beyond causal LM (the headline above is causal LM's)."""
    lines = [
        f"- {task}: {c['ran_all_default']} of {c['model_types']} types ran "
        f"{' and '.join(f'`{s}`' for s in c['scenarios'])} with transformers' defaults, "
        f"{c['ran_all_with_workaround']} counting the experts workaround."
        for task, c in by_task.items()
        if task != "causal-lm" and c
    ]
    return [""] + lines if lines else []


_COLUMNS = (
    "model_type",
    "scenario",
    "status",
    "compiles",
    "recompiles",
    "findings",
    "fallback_ops",
    "tensorcore",
    "reads_per_step",
    "step_ms",
    "agrees",
    "reason",
)


def markdown(records: list[dict[str, Any]], earlier: list[dict[str, Any]] | None = None) -> str:
    """The summary, then one line per cell (the reason cut to keep the table readable)."""
    out = [
        markdown_summary(summarize(records, earlier)),
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    for r in merged_rows(records, earlier):
        cells = [str(r[c] if r[c] is not None else "") for c in _COLUMNS]
        if r["disagreements"]:
            cells[-1] = f"DISAGREES: {r['disagreements']}"
        cells[-1] = (cells[-1] + (f" ({r['where']})" if r["where"] else ""))[:160]
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(out) + "\n"


def to_json(
    records: list[dict[str, Any]], earlier: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"summary": summarize(records, earlier), "cells": merged_rows(records, earlier)}


def to_csv(records: list[dict[str, Any]], earlier: list[dict[str, Any]] | None = None) -> str:
    rows = merged_rows(records, earlier)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def write_outputs(store: str | Path, records: list[dict[str, Any]] | None = None) -> Path:
    """zoo/table.md, zoo/cells.csv and zoo/cells.parquet in the store (DuckDB:
    `SELECT * FROM '<store>/zoo/cells.parquet'`); returns the zoo folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(store) / "zoo"
    folder.mkdir(parents=True, exist_ok=True)
    records = load_records(store) if records is None else records
    (folder / "table.md").write_text(markdown(records))
    (folder / "cells.csv").write_text(to_csv(records))
    if records:
        pq.write_table(pa.Table.from_pylist([row(r) for r in records]), folder / "cells.parquet")
    return folder
