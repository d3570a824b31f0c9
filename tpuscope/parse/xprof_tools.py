"""xprof's own analyses of device traces -> rows of `xprof_overview` and `xprof_ops`.

For TPU (and GPU) traces, xprof already computes what a profiler should not
re-derive: MXU utilization, device duty cycle and idle time (overview_page), per-op
time, FLOP rate, bandwidth and bound-by (hlo_stats), per-op FLOP and HBM utilization
(op_profile) and roofline efficiency (roofline_model), via
`xprof.convert.raw_to_tool_data.xspace_to_tool_data(paths, tool, params)`.

Two traps handled here: xprof writes cache files next to its inputs and re-reads them
on the next call (so inputs are copied into a private temporary folder first, never
touched where they live), and a tool that fails returns (None, ...) with the reason
discarded (so each failure is recorded as "tool gave no result"). Values such as
"86.5%" become 86.5. xprof is optional (`pip install tpuscope[xprof]`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOLS = ("overview_page", "hlo_stats", "op_profile", "roofline_model")
# hlo_stats column id -> xprof_ops column
_HLO_STATS = {
    "program_id": "program_id",
    "category": "category",
    "hlo_op_name": "hlo_op",
    "hlo_op_expression": "expression",
    "tf_op_name": "tf_op",
    "occurrences": "occurrences",
    "total_time": "total_time_us",
    "avg_time": "avg_time_us",
    "total_self_time": "self_time_us",
    "total_self_time_percent": "self_time_percent",
    "model_flop_rate": "model_gflops_per_s",
    "normalized_flop_rate": "normalized_gflops_per_s",
    "hbm_bw": "hbm_gibps",
    "operational_intensity": "operational_intensity",
    "bound_by": "bound_by",
    "source_info": "source_info",
}
_HTML_CELL = re.compile(r">([^<>]*)</div>\s*$")
_ROOFLINE_PEAKS = {
    "peak_flop_rate": "peak_flop_rate_gflops",
    "peak_hbm_bw": "peak_hbm_bw_gibps",
    "hbm_ridge_point": "hbm_ridge_point_flops_per_byte",
}


@dataclass
class XprofResult:
    overview: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def available() -> bool:
    try:
        from xprof.convert import raw_to_tool_data  # noqa: F401
    except Exception:
        return False
    return True


def number(value: Any) -> float | None:
    """'86.5%' -> 86.5, '4' -> 4.0, 12 -> 12.0; anything else -> None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%").replace(",", ""))
        except ValueError:
            return None
    return None


def run_tools(paths: Sequence[str | Path], tools: Sequence[str] = TOOLS) -> XprofResult:
    """Run xprof's tools over the xplane files of one profile (several hosts allowed)."""
    from xprof.convert import raw_to_tool_data

    result = XprofResult()
    with tempfile.TemporaryDirectory(prefix="tpuscope-xprof-") as tmp:
        copies = []
        for i, path in enumerate(paths):
            target = Path(tmp) / f"{i}" / Path(path).name
            target.parent.mkdir()
            shutil.copyfile(path, target)
            copies.append(str(target))
        outputs = {}
        for tool in tools:
            with _quiet_stderr():
                data, _ = raw_to_tool_data.xspace_to_tool_data(
                    copies, tool, {"use_saved_result": False}
                )
            if data is None:
                result.errors.append(f"xprof {tool}: no result")
                continue
            outputs[tool] = json.loads(data)
    return tool_rows(outputs, ", ".join(str(p) for p in paths), result)


def tool_rows(
    outputs: dict[str, Any], source: str, result: XprofResult | None = None
) -> XprofResult:
    """Rows of xprof's tool outputs (parsed JSON by tool name), from a trace or saved files."""
    result = result or XprofResult()
    if "overview_page" in outputs:
        result.overview = overview_rows(outputs["overview_page"], source)
    if "roofline_model" in outputs:
        result.overview += roofline_peaks(outputs["roofline_model"], source)
    if "hlo_stats" in outputs:
        result.ops = hlo_stats_rows(outputs["hlo_stats"])
        _join_op_profile(result.ops, outputs.get("op_profile"))
        _join_roofline(result.ops, outputs.get("roofline_model"))
    return result


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """xprof's C++ logs every step to fd 2 (I0000/W0000 lines): keep the user's terminal clean."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _row(source: str, name: str, value: Any) -> dict[str, Any]:
    return {
        "source": source,
        "name": name,
        "value": number(value),
        "text": None if value is None else str(value),
    }


def overview_rows(tables: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """Every property of the overview's DataTables (analysis, run environment, bottleneck
    statement, ...) plus its diagnostics as rows named 'diagnostic:<severity>'."""
    rows = []
    for table in tables:
        for name, value in (table.get("p") or {}).items():
            if value not in ("", None):
                rows.append(_row(source, name, value))
        cols = [c.get("id") for c in table.get("cols", [])]
        if cols[:2] == ["severity", "message"]:
            for r in table.get("rows", []):
                cells = [c.get("v") for c in r.get("c", [])]
                rows.append(
                    {
                        "source": source,
                        "name": f"diagnostic:{cells[0]}",
                        "value": None,
                        "text": cells[1],
                    }
                )
    return rows


def _records(table: dict[str, Any]) -> list[dict[str, Any]]:
    cols = [c.get("id") for c in table.get("cols", [])]
    return [
        dict(zip(cols, (c.get("v") if c else None for c in r.get("c", [])), strict=False))
        for r in table.get("rows", [])
    ]


def hlo_stats_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for record in _records(table):
        row = {out: record.get(src) for src, out in _HLO_STATS.items()}
        row["occurrences"] = int(row["occurrences"] or 0)
        for key in (
            "program_id",
            "category",
            "hlo_op",
            "expression",
            "tf_op",
            "bound_by",
            "source_info",
        ):
            row[key] = None if row[key] in (None, "") else str(row[key])
        cell = _HTML_CELL.search(row["source_info"] or "")
        if cell:  # '<div class=... title=stack>file.py:29</div>' -> 'file.py:29'
            row["source_info"] = cell[1].strip() or None
        rows.append(row)
    return rows


def _key(program: Any, op: Any) -> tuple[str, str]:
    return str(program or ""), str(op or "")


def _join_op_profile(ops: list[dict[str, Any]], profile: dict[str, Any] | None) -> None:
    """op_profile's per-op FLOP utilization (fraction of peak) and HBM bandwidth utilization,
    and XLA's FLOPs and HBM bytes per occurrence (its cost analysis, which xprof reports raw)."""
    found: dict[tuple[str, str], tuple[Any, ...]] = {}

    def walk(node: dict[str, Any]) -> None:
        xla = node.get("xla") or {}
        metrics = node.get("metrics") or {}
        if xla.get("expression"):
            bandwidth = (metrics.get("bandwidthUtils") or [None])[0]
            runs = number(metrics.get("occurrences")) or 0.0
            raw_bytes = (metrics.get("rawBytesAccessedArray") or [None])[0]
            per_run = (number(metrics.get("rawFlops")), number(raw_bytes)) if runs else (None, None)
            found[_key(xla.get("programId"), node.get("name"))] = (
                metrics.get("flops"),
                bandwidth,
                *(None if v is None else v / runs for v in per_run),
            )
        for child in node.get("children") or []:
            walk(child)

    if profile:
        walk(profile.get("byProgram") or {})
    for row in ops:
        flops, bandwidth, row["xla_flops"], row["xla_bytes"] = found.get(
            _key(row["program_id"], row["hlo_op"]), (None, None, None, None)
        )
        row["flops_utilization"], row["hbm_utilization"] = number(flops), number(bandwidth)


def _join_roofline(ops: list[dict[str, Any]], roofline: list[dict[str, Any]] | None) -> None:
    found = {}
    for record in _records(roofline[0]) if roofline else []:
        if record.get("step") == "Total":
            found[_key(record.get("hlo_module_id"), record.get("operation"))] = record.get(
                "roofline_efficiency"
            )
    for row in ops:
        row["roofline_efficiency"] = number(found.get(_key(row["program_id"], row["hlo_op"])))


def roofline_peaks(roofline: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The chip's peak FLOP rate, HBM bandwidth and ridge point as xprof states them."""
    props = (roofline[0].get("p") or {}) if roofline else {}
    return [_row(source, name, props[key]) for key, name in _ROOFLINE_PEAKS.items() if key in props]
