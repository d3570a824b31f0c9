"""Importer for xprof's saved tool outputs: a folder of `*hlo_stats*.json[.gz]`, `*op_profile*`, ...

xprof (and TensorBoard's profile plugin) write each tool's result as JSON; a profile
shared without its xplane (xprof's own golden test data, a colleague's export) is
only these files. They become the run's `xprof_overview` and `xprof_ops` tables with
the same row builders as a live xprof analysis (`collect/xprof_tools.tool_rows`), so
`tpuscope trace RUN` compares the cost model with the measured op times the same way.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from tpuscope.ingest import xprof_figures
from tpuscope.ingest.registry import Imported, Importer, register
from tpuscope.parse.xprof_tools import TOOLS, tool_rows

_PROGRAM = re.compile(r"^(.*)\((\d+)\)$")


def tool_files(path: Path) -> dict[str, Path]:
    """tool name -> its file, for the tools tpuscope reads (names contain the tool's name)."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    found: dict[str, Path] = {}
    for file in files:
        name = file.name
        if not (name.endswith(".json") or name.endswith(".json.gz")):
            continue
        for tool in TOOLS:
            if tool in name and tool not in found:
                found[tool] = file
    return found


def _read(path: Path) -> Any:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _programs(op_profile: Any) -> dict[str, str]:
    """program id -> module name, from op_profile's 'jit_train_step(2041036616644817336)' nodes."""
    children = ((op_profile or {}).get("byProgram") or {}).get("children") or []
    found = (_PROGRAM.match(str(c.get("name", ""))) for c in children)
    return {m[2]: m[1] for m in found if m}


def _without_empty_duty_cycle(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop a duty cycle and idle time that are both 0%: xprof found no step to measure them in
    (its golden v5 training overview says so), and 0% busy would read as a fully idle device."""
    values = {r["name"]: r["value"] for r in rows}
    if values.get("device_duty_cycle_percent") == 0 and values.get("device_idle_time_percent") == 0:
        return [
            r
            for r in rows
            if r["name"] not in ("device_duty_cycle_percent", "device_idle_time_percent")
        ]
    return rows


def load(path: Path) -> Imported:
    files = tool_files(path)
    if "hlo_stats" not in files and "overview_page" not in files:
        raise ValueError("no xprof hlo_stats or overview_page JSON in it")
    outputs = {tool: _read(file) for tool, file in files.items()}
    result = tool_rows(outputs, str(path))
    host = path.name if path.is_dir() else path.parent.name
    fields = {"host": host, "pid": 0, "rank": 0}
    kind = xprof_figures.device_kind(result.overview)
    result.overview = xprof_figures.overview_rows(_without_empty_duty_cycle(result.overview), kind)
    result.ops = xprof_figures.op_rows(result.ops)
    evidence = Imported(meta={"backend": "xprof"})
    evidence.add("xprof_overview", [{**fields, **r} for r in result.overview])
    evidence.add("xprof_ops", [{**fields, **r} for r in result.ops])
    programs = _programs(outputs.get("op_profile"))
    if programs:
        evidence.meta["xprof_programs"] = programs
    if kind:
        evidence.meta["device_kind"] = kind
    evidence.read = list(files.values())
    evidence.summary = (
        f"xprof tool outputs ({', '.join(sorted(files))}): {len(result.ops)} HLO op(s)"
    )
    return evidence


def sniff(path: Path, head: bytes) -> bool:
    return path.is_dir() and "hlo_stats" in tool_files(path)


IMPORTER = register(
    Importer(
        name="xprof_json",
        description="xprof tool outputs (a folder of *hlo_stats*.json[.gz], *op_profile*, *overview_page*, ...)",
        sniff=sniff,
        load=load,
    )
)
