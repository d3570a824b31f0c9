"""What every detector shares: the warm-up rule, judged steps, severities, per-step metrics.

Warm-up. `--warmup N` (meta['warmup'], default 2) steps are never judged. When the
program is still compiling new graphs at step N, warm-up extends to the first step
that compiles nothing (its graphs all ran before: the step's set of graphs repeats),
by at most N more steps, so a loop that needs three steps to settle is not flagged
while a recompile storm is still judged from step 2N at the latest. Each process
has its own steps, so each gets its own warm-up. A trailing step with boundary "end"
(work after the loop, recorded when profiling stops) is never judged.

Imported evidence (a metrics report, a PT_XLA_DEBUG log) has no steps: its rows
carry step -1 and are judged as whole-run totals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from tpuscope.analyze.warmup import effective_warmup
from tpuscope.detect.registry import RunTables

__all__ = ["effective_warmup"]

NS = 1e9
WHOLE_RUN = -1  # step of rows that are totals over a whole run (imported evidence)
KEYS = ["host", "pid"]
HIGH_SHARE = 0.10  # cost / judged wall time at or above which a finding is high severity
MEDIUM_SHARE = 0.01


def _process_keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in KEYS if k in frame.columns]


def warmups(tables: RunTables) -> dict[tuple[Any, ...], int]:
    """Effective warm-up per process, keyed by (host, pid)."""
    steps = tables.steps
    if steps.empty:
        return {}
    keys = _process_keys(steps)
    if not keys:
        return {(): effective_warmup(steps, tables.warmup)}
    return {(key if isinstance(key, tuple) else (key,)): effective_warmup(group, tables.warmup)
            for key, group in steps.groupby(keys, dropna=False)}


def judged_steps(tables: RunTables) -> pd.DataFrame:
    """Steps past each process's warm-up, without the trailing "end" step."""
    steps = tables.steps
    if steps.empty:
        return steps
    limits = warmups(tables)
    keys = _process_keys(steps)
    if keys:
        table = pd.DataFrame([(*k, w) for k, w in limits.items()], columns=[*keys, "_warmup"])
        steps = steps.merge(table, on=keys, how="left")
    else:
        steps = steps.assign(_warmup=limits.get((), tables.warmup))
    ended = steps["boundary"].astype(str).eq("end") if "boundary" in steps else False
    return steps[(steps["step"] >= steps["_warmup"].fillna(tables.warmup)) & ~ended].drop(columns="_warmup")


def judged_rows(frame: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """Rows of a per-step table that fall in judged steps; whole-run rows (step -1) are kept."""
    if frame.empty:
        return frame
    whole = frame[frame["step"] == WHOLE_RUN]
    if judged.empty:
        return whole
    keys = [k for k in _process_keys(frame) if k in judged.columns]
    index = judged[keys + ["step"]].drop_duplicates()
    return pd.concat([frame.merge(index, on=keys + ["step"], how="inner"), whole], ignore_index=True)


def severity_for(cost_s: float, wall_s: float, floor: str = "low") -> str:
    """high at >= 10% of the judged wall time, medium at >= 1%, else `floor`."""
    share = cost_s / wall_s if wall_s > 0 else 0.0
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    return floor


def wall_s(judged: pd.DataFrame) -> float:
    return float(judged["wall_ns"].sum()) / NS if not judged.empty else 0.0


def metric_per_step(metrics: pd.DataFrame, names: Iterable[str], column: str = "total") -> pd.DataFrame:
    """Sum of a metric's `column` per (process, step), for any of its names (old and new)."""
    names = list(names)
    rows = metrics[metrics["name"].isin(names)] if not metrics.empty else metrics
    keys = _process_keys(metrics) + ["step"] if not metrics.empty else ["step"]
    if rows.empty:
        return pd.DataFrame(columns=[*keys, column])
    return rows.groupby(keys, dropna=False)[column].sum().reset_index()


def counter_total(metrics: pd.DataFrame, names: Iterable[str], column: str = "count") -> float:
    """Whole-run total of a counter or metric (imported rows and per-step rows alike)."""
    if metrics.empty:
        return 0.0
    return float(metrics.loc[metrics["name"].isin(list(names)), column].sum())


def whole_run(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that are whole-run totals (imported evidence)."""
    return frame[frame["step"] == WHOLE_RUN] if not frame.empty else frame


def per_process(frame: pd.DataFrame, names: Iterable[str], column: str = "count",
                name_column: str = "name") -> dict[tuple[Any, ...], float]:
    """Whole-run total of some names per process (each imported file is its own process)."""
    rows = whole_run(frame)
    if rows.empty:
        return {}
    rows = rows[rows[name_column].isin(list(names))]
    keys = _process_keys(rows)
    if rows.empty:
        return {}
    if not keys:
        return {(): float(rows[column].sum())}
    grouped = rows.groupby(keys, dropna=False)[column].sum()
    return {(k if isinstance(k, tuple) else (k,)): float(v) for k, v in grouped.items()}


def rate_per_step(counts: dict[tuple[Any, ...], float], steps: dict[tuple[Any, ...], float]) -> float | None:
    """Sum of counts over sum of step markers, over the processes that counted their steps."""
    known = [k for k in counts if steps.get(k)]
    total_steps = sum(steps[k] for k in known)
    return sum(counts[k] for k in known) / total_steps if total_steps else None


def short_path(location: str | None) -> str:
    """'/work/main/examples/train.py:67' -> 'train.py:67' (titles stay short; `location` keeps all)."""
    if not isinstance(location, str) or not location:  # None, or NaN from a pandas column
        return "unknown line"
    path, _, line = location.rpartition(":")
    name = path.rsplit("/", 1)[-1] if path else location
    return f"{name}:{line}" if path else name


def steps_list(values: Iterable[Any]) -> list[int]:
    return sorted({int(v) for v in values if v is not None and int(v) >= 0})
