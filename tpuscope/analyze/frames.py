"""A DataFrame's rows as dicts keyed by column name, typed as such.

pandas-stubs type `DataFrame.to_dict("records")` as `list[dict[Hashable, Any]]` (a column label
may be any hashable); tpuscope's tables are named by strings, so the rules read rows through
this one place instead of casting at every loop.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`frame.to_dict("records")`, typed by the string column names every table has."""
    return cast(list[dict[str, Any]], frame.to_dict("records"))
