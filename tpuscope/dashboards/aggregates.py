"""The Fallbacks page's tables, aggregated by DuckDB where the rows are.

A run with a fallback in every step has two rows per step in `fallbacks`: at a million
steps the page read 2M rows into pandas and grouped them twice per request (2.5 s cold,
1.2 s warm). What it shows is one row per (op, call site) and an op x step-bin matrix of
at most 200 columns; DuckDB computes both from the four columns they need and returns a
few hundred rows, which figures.fallbacks and pages.fallbacks then treat as they treat
the pandas reference (`fallback_matrix`, `fallback_sites`), which the tests compare with.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from tpuscope.analyze.judge import VALUE_READ_OPS

from .figures.fallbacks import MAX_COLUMNS, MAX_OPS

if TYPE_CHECKING:
    from .data import StoreData

UNPLACED = "(not traced)"  # the note above the table says why
# CPU fallbacks only: value reads (.item(): aten::_local_scalar_dense) are host syncs, counted
# apart on every surface (tpuscope.analyze.judge), as the report's and the pages' counts are.
FALLBACKS_ONLY = "op::VARCHAR NOT IN ({})".format(", ".join(f"'{op}'" for op in VALUE_READ_OPS))


def fallback_sites(data: StoreData, run_id: str) -> pd.DataFrame:
    """One row per (op, call site): calls, steps with calls, first and last step (sorted by
    op and site, as a pandas groupby gives them)."""
    return data.query(
        run_id,
        f"""
        SELECT op::VARCHAR AS op, coalesce(location, '{UNPLACED}') AS location,
               sum(count)::BIGINT AS count, count(DISTINCT step)::BIGINT AS steps,
               min(step)::BIGINT AS first_step, max(step)::BIGINT AS last_step
        FROM fallbacks WHERE {FALLBACKS_ONLY} GROUP BY ALL ORDER BY op, location""",
        ["fallbacks"],
    ).to_pandas()


def fallback_matrix(
    data: StoreData, run_id: str, max_columns: int = MAX_COLUMNS, max_ops: int = MAX_OPS
) -> tuple[pd.DataFrame, int]:
    """Calls per (op, step bin) and the bin width, as figures.fallbacks.fallback_matrix makes
    them from the whole table: at most max_columns bins, the busiest max_ops ops first."""
    con = data.duckdb(run_id, ["fallbacks"])
    try:
        lo, hi = con.sql(
            f"SELECT min(step), max(step) FROM fallbacks WHERE {FALLBACKS_ONLY}"
        ).fetchall()[0]
        if lo is None:
            return pd.DataFrame(), 1
        width = max(1, math.ceil((hi - lo + 1) / max_columns))
        long = (
            con.sql(f"""
            SELECT op::VARCHAR AS op, {lo} + (step - {lo}) // {width} * {width} AS bin,
                   sum(count)::BIGINT AS count
            FROM fallbacks WHERE {FALLBACKS_ONLY} GROUP BY ALL""")
            .to_arrow_table()
            .to_pandas()
        )
    finally:
        con.close()
    matrix = long.pivot_table(
        index="op", columns="bin", values="count", aggfunc="sum", fill_value=0
    )
    order = matrix.sum(axis=1).sort_values(ascending=False).index[:max_ops]
    return matrix.loc[order], width
