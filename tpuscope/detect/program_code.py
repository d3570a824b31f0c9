"""What a run says of the program's own code: the files its user lines are in, and the
functions it jitted. Read by the device-idle card to say where the host's traced time went
(analyze/host_time.py)."""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.tensorcore import is_library_path
from tpuscope.detect.tables import RunTables


def jitted_functions(tables: RunTables) -> frozenset[str]:
    """The names of the functions the program jitted (its compiles outside the eager ones)."""
    compiles = tables.compiles
    if compiles.empty or "function" not in compiles:
        return frozenset()
    jitted = (
        compiles
        if "eager" not in compiles
        else compiles[~compiles["eager"].fillna(False).astype(bool)]
    )
    return frozenset(str(f) for f in jitted["function"].dropna().unique())


def program_files(tables: RunTables) -> list[str]:
    """The program's own files tpuscope saw: its call sites' and compiles' user lines."""
    paths: set[str] = set()
    for frame in (tables.extra.get("call_sites", pd.DataFrame()), tables.compiles):
        if "location" in frame:
            paths |= {str(v).rsplit(":", 1)[0] for v in frame["location"].dropna().unique()}
    return sorted(p for p in paths if p and not is_library_path(p))
