"""The corpus drivers' ground-truth hook: measures a program without tpuscope.

When the environment variable CORPUS_TRUTH names a file, a driver calls `mark(label)` at the
points it wants measured (e.g. the top of every loop iteration, the end of each epoch) and
`finish(iterations=N, **notes)` at the end; the hook then writes one JSON file:

- torch_xla: at every mark, every `torch_xla.debug.metrics` counter (UncachedCompile,
  CachedCompile, ExecuteComputation, MarkStep, every fallback counter in every namespace:
  `aten::*`, `torchvision::*`, a custom op's `<ns>::*`, and torch_xla's own `xla::*`), the
  sample counts of EagerOpExecuteTime, ExecuteTime, CompileTime and TransferFromDeviceTime
  (device-to-host reads), and at the end `executed_fallback_ops()`;
- JAX: every "Compiling jit(NAME) with global shapes and types ..." log line of
  `jax_log_compiles`, with the label of the last mark before it.

With CORPUS_TRUTH unset every function here returns at once and nothing is imported, so
the program runs as the user wrote it (that is how tpuscope runs it).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

_PATH = os.environ.get("CORPUS_TRUTH") or ""
_state: dict[str, Any] = {"backend": None, "marks": [], "jax_compiles": [], "label": "setup",
                          "extra": {}}
_COMPILING = re.compile(r"Compiling (?:jit\()?([\w.<>-]+)\)? with global shapes and types (.*?)\. Argument")


def enabled() -> bool:
    return bool(_PATH)


class _JaxCompileLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        match = _COMPILING.search(record.getMessage())
        if match:
            _state["jax_compiles"].append({"fun": match.group(1), "shapes": match.group(2),
                                           "label": _state["label"]})


def start(backend: str) -> None:
    """Call once, before the program's first device work: backend is 'xla' or 'jax'."""
    if not _PATH:
        return
    _state["backend"] = backend
    if backend == "jax":
        import jax

        jax.config.update("jax_log_compiles", True)
        handler = _JaxCompileLog(level=logging.DEBUG)
        logger = logging.getLogger("jax")
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # keep the measuring run's stderr readable
    mark("setup")


def _xla_counters() -> dict[str, int]:
    import torch_xla.debug.metrics as met

    counters = {name: int(met.counter_value(name) or 0) for name in met.counter_names()}
    for metric in ("EagerOpExecuteTime", "ExecuteTime", "CompileTime", "TransferFromDeviceTime"):
        data = met.metric_data(metric)
        counters[f"metric:{metric}"] = int(data[0]) if data else 0
    return counters


def mark(label: str) -> None:
    """Record the counters now, and make `label` the current phase (JAX compiles are tagged with it)."""
    if not _PATH:
        return
    _state["label"] = label
    row: dict[str, Any] = {"label": label}
    if _state["backend"] == "xla":
        row["counters"] = _xla_counters()
    _state["marks"].append(row)


def finish(iterations: Any, **notes: Any) -> None:
    """Write the truth file (call at the very end of the program), with the program's iteration
    count and any other plain values the truth needs (a shape, the lengths it ran)."""
    if not _PATH:
        return
    _state["extra"].update(iterations=iterations, **notes)
    mark("end")
    if _state["backend"] == "xla":
        import torch_xla.debug.metrics as met

        _state["fallback_ops"] = sorted(met.executed_fallback_ops())
    with open(_PATH, "w") as f:
        json.dump(_state, f, indent=1)
