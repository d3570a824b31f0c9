"""The warm-up rule, shared by the report's headline figures and every detector.

`--warmup N` (meta['warmup'], default 2) steps are never judged. When the program
is still compiling new graphs at step N, warm-up extends to the first step that
compiles nothing (its set of graphs repeats), by at most N more steps, so a loop
that needs three steps to settle is not flagged while a recompile storm is still
judged from step 2N at the latest. Each process has its own steps, so each gets its
own warm-up.
"""

from __future__ import annotations

import pandas as pd

PROCESS_KEYS = ["host", "pid"]


def effective_warmup(steps: pd.DataFrame, warmup: int) -> int:
    """Warm-up steps of one process's steps table."""
    if warmup <= 0 or steps.empty:
        return max(warmup, 0)
    ordered = steps.sort_values("step")
    quiet = ordered[(ordered["step"] >= 1) & (ordered["compiles"].fillna(0) == 0)]
    settled = int(quiet["step"].iloc[0]) if not quiet.empty else None
    if settled is None or settled <= warmup:
        return warmup if settled is not None else 2 * warmup
    return min(settled, 2 * warmup)


def warmup_by_process(steps: pd.DataFrame, warmup: int) -> dict[tuple, int]:
    """Effective warm-up per (host, pid)."""
    keys = [k for k in PROCESS_KEYS if k in steps.columns]
    if steps.empty or not keys:
        return {}
    return {(key if isinstance(key, tuple) else (key,)): effective_warmup(group, warmup)
            for key, group in steps.groupby(keys, dropna=False)}


def after_warmup(frame: pd.DataFrame, warmups: dict[tuple, int], default: int) -> pd.DataFrame:
    """Rows of `frame` whose step is past its process's warm-up (default for unknown ones)."""
    if frame.empty or "step" not in frame:
        return frame
    keys = [k for k in PROCESS_KEYS if k in frame.columns]
    if not keys or not warmups:
        return frame[frame["step"] >= default]
    limits = pd.DataFrame([(*k, v) for k, v in warmups.items()], columns=[*keys, "_limit"])
    merged = frame[keys].merge(limits, on=keys, how="left")
    limit = merged["_limit"].fillna(default).to_numpy()
    return frame[frame["step"].to_numpy() >= limit]
