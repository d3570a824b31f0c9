"""The JSON forms of what tpuscope prints, for scripts (`tpuscope show RUN --json`, `diff --json`, ...)."""

from __future__ import annotations

import json
import math
from typing import Any

from tpuscope.detect.run_analysis import RunReport


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def to_json(report: RunReport) -> str:
    return json.dumps(_clean(report.to_dict()), indent=2, default=str)


def report_json(report: RunReport) -> str:
    """`show --json`: the report as JSON, a line of its own (report/renderers.py)."""
    return to_json(report) + "\n"


def clean_json(data: Any) -> str:
    """`import --json`: the run made, its files and its report (NaN and numpy scalars made plain)."""
    return json.dumps(_clean(data), indent=2, default=str) + "\n"


def plain_json(data: Any) -> str:
    """Data that is already JSON-shaped (a diff, a device view, the runs), as the CLI prints it."""
    return json.dumps(data, indent=2, default=str) + "\n"
