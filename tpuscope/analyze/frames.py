"""A DataFrame's rows as dicts keyed by column name, typed as such.

pandas-stubs type `DataFrame.to_dict("records")` as `list[dict[Hashable, Any]]` (a column label
may be any hashable); tpuscope's tables are named by strings, so the rules read rows through
this one place instead of casting at every loop. Rows that leave as JSON (a report's top ops)
go through `json_records`, the one place a frame's missing value (NaN) becomes null.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`frame.to_dict("records")`, typed by the string column names every table has."""
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows as JSON values: a missing value (NaN) is None, a numpy scalar a Python one."""
    return [{k: _json_value(v) for k, v in row.items()} for row in records(frame)]


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value
