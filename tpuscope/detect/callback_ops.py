"""What a host callback's Python did with JAX: the ops it ran on its arguments outside jit, and
their compiles (collect/jax/callbacks.py counts the ops on the callback's runs, the metrics row
`jax.host_callbacks/ops/...`, and names the callback on each compile it made, the compiles
column `callback`). A callback's arguments are jax.Arrays: each index, mask or sum on them is a
dispatch of its own, compiled at each new shape. The host_callback card says so, and the
compile_time card counts those compiles as the callback's, not as setup run op by op."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.detect.common import judged_rows
from tpuscope.detect.tables import RunTables
from tpuscope.schema_consts import host_callback_ops_metric


@dataclass(frozen=True)
class CallbackOps:
    """One callback's JAX ops in the judged steps (their count, their host seconds with the
    compiles inside them) and its compiles in the run (count, seconds)."""

    ops: int = 0
    ops_s: float = 0.0
    compiles: int = 0
    compile_s: float = 0.0


def callback_site(name: str, location: str | None) -> str:
    """How the compiles table names a callback: 'api(fn) @ file:line'."""
    return f"{name} @ {location or '?'}"


def callback_ops(tables: RunTables, name: str, location: str) -> CallbackOps:
    """The ops and compiles of the callback `name` at `location`."""
    metric = host_callback_ops_metric(name, location or None)
    rows = judged_rows(tables.metric_rows([metric]), tables.judged)
    compiled = callback_compiles(tables.compiles)
    mine = compiled[compiled["callback"] == callback_site(name, location or None)]
    if "duration_ns" not in mine:
        mine = mine.assign(duration_ns=pd.Series(dtype=float))
    return CallbackOps(
        int(rows["count"].sum()) if not rows.empty else 0,
        float(rows["total"].sum()) / 1e9 if not rows.empty else 0.0,
        len(mine),
        float(mine["duration_ns"].sum()) / 1e9,
    )


def callback_compiles(compiles: pd.DataFrame) -> pd.DataFrame:
    """The compiles a host callback's Python made (none in runs written before the column)."""
    if compiles.empty or "callback" not in compiles:
        return compiles.iloc[0:0].assign(callback=pd.Series(dtype=object))
    return compiles[compiles["callback"].notna()]
