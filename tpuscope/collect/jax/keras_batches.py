"""Keras's `fit` run without jit: its batches are the steps.

A Keras 3 model with a layer that does not support jit (RandomRotation, RandomZoom: Keras
then sets `jit_compile` False) runs `fit` op by op, so no jitted step function recurs and
the run was one step: keras-io's ViT on a v5e read "steps: 1" over its 10 batches
(docs/tpu.md). `fit` calls its CallbackList's `on_train_batch_begin` and `_end` around each
batch's train function; where the model is not jit-compiled (or runs eagerly) and no jitted
step function was found, those two calls bracket a step, as a StepTraceAnnotation block does.

Installed when Keras's `keras.src.callbacks.callback_list` is imported (tpuscope never imports
Keras); the class is patched once a process, and the patch reports only to the live hook.
"""

from __future__ import annotations

import sys
from typing import Any

import wrapt

from tpuscope.collect.jax.sink import Sink, report

MODULE = "keras.src.callbacks.callback_list"
BOUNDARY = "keras:train_batch"
SOURCE = "Keras fit's batches (its model run without jit)"
_LIVE: list[KerasBatchHook] = []  # the installed hook, if any (the patch reads it per call)
_REGISTERED: list[bool] = []  # wrapt keeps a post-import hook for the process: register once


def _runs_eagerly(model: Any) -> bool:
    return bool(getattr(model, "run_eagerly", False)) or not getattr(model, "jit_compile", True)


class KerasBatchHook:
    """Reports the train batches of a Keras `fit` whose model runs without jit."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._inside = False

    def install(self, jax: Any = None) -> KerasBatchHook:
        _LIVE[:] = [self]
        if sys.modules.get(MODULE) is not None:
            _patch(sys.modules[MODULE])
        elif not _REGISTERED:
            _REGISTERED.append(True)
            wrapt.register_post_import_hook(_patch, MODULE)
        return self

    def uninstall(self) -> None:
        if _LIVE and _LIVE[0] is self:
            _LIVE.clear()

    def begin(self, callbacks: Any) -> None:
        model = getattr(callbacks, "model", None)
        if model is None or not _runs_eagerly(model) or getattr(self.sink, "step_fn", None):
            return
        self._inside = True
        report(self.sink.on_annotation, True, BOUNDARY, SOURCE)

    def end(self) -> None:
        if self._inside:
            self._inside = False
            report(self.sink.on_annotation, False, BOUNDARY, SOURCE)


def _patch(module: Any) -> None:
    """Wrap CallbackList's two batch calls, once; each asks the live hook, if any."""
    cls = getattr(module, "CallbackList", None)
    if cls is None or getattr(cls, "_tpuscope_batches", False):
        return
    base_begin, base_end = cls.on_train_batch_begin, cls.on_train_batch_end

    def on_train_batch_begin(callbacks: Any, batch: Any, logs: Any = None) -> Any:
        if _LIVE:
            report(_LIVE[0].begin, callbacks)
        return base_begin(callbacks, batch, logs)

    def on_train_batch_end(callbacks: Any, batch: Any, logs: Any = None) -> Any:
        try:
            return base_end(callbacks, batch, logs)
        finally:
            if _LIVE:
                report(_LIVE[0].end)

    cls.on_train_batch_begin, cls.on_train_batch_end = on_train_batch_begin, on_train_batch_end
    cls._tpuscope_batches = True
