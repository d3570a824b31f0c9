"""What every detector shares: judged steps, severity, per-step metrics, short paths.

The rules themselves (judged steps, severity thresholds, graph families) live in
tpuscope.analyze (judge.py, families.py), so every surface judges the same way;
this module adapts them to RunTables.

Imported evidence (a metrics report, a PT_XLA_DEBUG log) has no steps: its rows
carry step -1 and are judged as whole-run totals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.device_time import STEP_WINDOWS
from tpuscope.detect.tables import RunTables

NS = 1e9
WHOLE_RUN = -1  # step of rows that are totals over a whole run (imported evidence)
KEYS = ["host", "pid"]


def _process_keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in KEYS if k in frame.columns]


def loop_steps(tables: RunTables) -> pd.DataFrame:
    """Every step of the program's loop (warm-up included, the after-the-loop step not)."""
    return tables.loop


def judged_rows(frame: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """Rows of a per-step table that fall in judged steps; whole-run rows (step -1) are kept."""
    if frame.empty:
        return frame
    step = frame["step"].to_numpy()
    whole = step == WHOLE_RUN
    if judged.empty:
        return frame[whole]
    keys = [k for k in _process_keys(frame) if k in judged.columns]
    if not keys:
        return frame[np.isin(step, judged["step"].to_numpy()) | whole]
    keep = whole.copy()
    # per process a vectorised isin (a few processes): a merge on (host, pid, step) factorised
    # the string keys of every row, seconds on a million steps
    for key, rows in judged.groupby(keys, dropna=False, sort=False):
        match = np.ones(len(frame), dtype=bool)
        for name, value in zip(keys, key if isinstance(key, tuple) else (key,), strict=True):
            column = frame[name]
            match &= (
                column.isna().to_numpy()
                if value != value or value is None
                else (column == value).to_numpy()
            )
        keep |= match & np.isin(step, rows["step"].to_numpy())
    return frame[keep]


def judged_severity(cost_s: float, tables: RunTables) -> str:
    """The shared rule (analyze/judge.severity) against the judged steps' wall time."""
    return judge.severity(cost_s, judged_wall_s(tables))


def judged_wall_s(tables: RunTables) -> float:
    """Wall time of the judged steps (analyze/judge.wall_s), what per-step costs are shares
    of; analyze/judge.run_wall_s is the whole run's, what one-off costs are shares of."""
    return judge.wall_s(tables.judged)


VALUE_READ_CAUSE = "access tensor value"


def value_read_site(tables: RunTables, steps: Iterable[int]) -> str | None:
    """The user's line where torch_xla cut graphs to read values in these steps (its compile
    analyses name it), for reads and fallbacks whose call sites were not traced: a program with
    no step boundary, where the tracer (armed at boundaries) never ran."""
    families = tables.families
    if families.empty or "cause" not in families:
        return None
    reads = families[
        families["cause"].astype(str).str.contains(VALUE_READ_CAUSE, regex=False)
        & families["location"].notna()
    ]
    if reads.empty:
        return None
    rows = reads[reads["step"].isin(steps if hasattr(steps, "dtype") else list(steps))]
    return str(rows["location"].mode().iloc[0]) if not rows.empty else None


def metric_per_step(
    metrics: pd.DataFrame, names: Iterable[str], column: str = "total"
) -> pd.DataFrame:
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


def per_process(
    frame: pd.DataFrame, names: Iterable[str], column: str = "count", name_column: str = "name"
) -> dict[tuple[Any, ...], float]:
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


def rate_per_step(
    counts: dict[tuple[Any, ...], float], steps: dict[tuple[Any, ...], float]
) -> float | None:
    """Sum of counts over sum of step markers, over the processes that counted their steps."""
    known = [k for k in counts if steps.get(k)]
    total_steps = sum(steps[k] for k in known)
    return sum(counts[k] for k in known) / total_steps if total_steps else None


UNKNOWN_LOCATION = "unknown line"  # where a compile or an op has no user's line


def file_and_line(location: str | None) -> str:
    """'/work/main/examples/train.py:67' -> 'train.py:67' (titles stay short; `location` keeps all)."""
    if not isinstance(location, str) or not location:  # None, or NaN from a pandas column
        return UNKNOWN_LOCATION
    path, _, line = location.rpartition(":")
    name = path.rsplit("/", 1)[-1] if path else location
    return f"{name}:{line}" if path else name


def line_inside(location: str | None, library_frame: str | None) -> str:
    """'train.py:37, inside transformers/masking_utils.py:354': the user's line, and the
    library line inside that call that did the work (a read, a fallback) when it was not the
    user's line itself."""
    where = file_and_line(location)
    return f"{where}, inside {library_frame}" if library_frame else where


def traced_judged(tables: RunTables) -> list[int] | None:
    """The judged steps the trace's windows hold: the run's own steps, or the chip's (an
    imported TPU trace); a module run the trace's start cut short is in none of them. None:
    the trace has no step windows."""
    device_steps = tables.extra.get("device_steps", pd.DataFrame())
    windows = device_steps["window"].isin(STEP_WINDOWS) if not device_steps.empty else None
    if windows is None or not windows.any():
        return None
    traced = set(device_steps.loc[windows, "step"])
    judged = tables.judged
    steps = sorted(int(s) for s in traced & set(judged["step"])) if not judged.empty else []
    return steps or sorted(int(s) for s in traced)
