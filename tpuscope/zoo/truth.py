"""A cell's ground truth from plain torch_xla counters, read inside the cell's own process.

The scenario program calls `mark(label)` at the top of every step or request and `finish(...)`
at its end (or `failed(...)` when it raised); with ZOO_TRUTH naming a file, each mark records
every `torch_xla.debug.metrics` counter (UncachedCompile, CachedCompile, ExecuteComputation,
MarkStep, every `aten::*` / `xla::*` counter) and the end adds `executed_fallback_ops()`: the
same measurements as tests/corpus/hook.py, independent of tpuscope's collector, so a cell can
say whether tpuscope's findings agree with what the runtime counted.
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Any

ENV = "ZOO_TRUTH"
_LOWERED = (
    "xla::",
    "CreateXlaTensor",
    "DestroyLtcTensor",
    "DestroyXlaTensor",
)  # lowered ops, bookkeeping
_state: dict[str, Any] = {"marks": [], "extra": {}}


def _counters() -> dict[str, int]:
    import torch_xla.debug.metrics as met

    counters = {
        name: int(met.counter_value(name) or 0)
        for name in met.counter_names()
        if not name.startswith(_LOWERED)
    }
    data = met.metric_data("EagerOpExecuteTime")  # one sample per op run eagerly
    counters["metric:EagerOpExecuteTime"] = int(data[0]) if data else 0
    return counters


def mark(label: str) -> None:
    """Record every counter now; the work from here to the next mark is phase `label`."""
    if os.environ.get(ENV):
        _state["marks"].append({"label": label, "counters": _counters()})


def _write() -> None:
    path = os.environ.get(ENV)
    if path:
        with open(path, "w") as f:
            json.dump(_state, f)


def finish(**notes: Any) -> None:
    """The end of the program: the last mark, the fallback ops, the notes; the file written."""
    import torch_xla.debug.metrics as met

    _state["extra"].update(notes)
    mark("end")
    _state["fallback_ops"] = sorted(met.executed_fallback_ops())
    _write()


def failed(
    exc: BaseException, phase: str, status: str = "error", cpu_error: str | None = None
) -> None:
    """The program raised in `phase` (build, a step, generate): the reason kept for the table."""
    import torch_xla.debug.metrics as met

    frames = traceback.extract_tb(exc.__traceback__)
    where = next(
        (
            f"{f.filename.rsplit('site-packages/', 1)[-1]}:{f.lineno}"
            for f in reversed(frames)
            if "transformers" in f.filename
        ),
        None,
    )
    _state["error"] = {
        "status": status,
        "phase": phase,
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "",
        "where": where,
        "cpu_error": cpu_error,
        "fallback_ops": sorted(
            op for op in met.executed_fallback_ops() if "_local_scalar_dense" not in op
        ),
    }
    _write()
