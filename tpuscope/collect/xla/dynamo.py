"""Steps of `torch.compile(fn, backend="openxla")` loops: a compiled call is a step boundary.

After dynamo traced a function, torch_xla's openxla bridge runs each call as cached XLA
graphs (`torch_xla._XLAC._run_cached_graph`, in torch_xla/_dynamo/dynamo_bridge.py) and
never passes `torch_xla.sync`, so the sync hook sees no step at all: a 12-iteration loop
was 2 steps (the tracing call's syncs) and "after the loop: 12 executions". Measured here
(tests/corpus/corpus_xla_dynamo_train.py): a compiled training step runs 3 cached graphs
(forward, backward, optimizer) per call, plus 1 lazy graph that materialises its inputs;
none of the cached runs moves a compile-cache counter or `ExecuteComputation`.

Two small hooks, both installed only while the collector is, both no-ops after:
- `_run_cached_graph` is wrapped to count graph runs (the launched work of a step);
- every `torch.compile` context created from now on gets one more of dynamo's own
  enter/exit hooks (`_TorchDynamoContext.enter_exit_hooks`, run by the compiled
  function's wrapper on entry, its cleanup in the wrapper's `finally` at return); the
  return of the outermost compiled call is a step boundary candidate ("torch.compile",
  collect/xla/steps.py): the step rule still decides whether it launched work. Dynamo
  runs these hooks with its frame evaluation off, so nothing here is traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


class CompiledCalls:
    """Counts dynamo's cached-graph runs and calls `on_return()` when an outermost compiled call returns."""

    def __init__(self, xlac: Any, on_return: Callable[[], None]) -> None:
        self.runs = 0  # cached graphs run so far
        self._depth = 0
        self._on_return = on_return
        self._xlac = xlac
        self._run_original: Any = None
        self._init_original: Any = None
        self._context_class: Any = None
        self.active = False

    def install(self) -> CompiledCalls:
        original = getattr(self._xlac, "_run_cached_graph", None)
        if original is not None:
            calls = self

            def _run_cached_graph(*args: Any, **kwargs: Any) -> Any:
                calls.runs += 1
                return original(*args, **kwargs)

            self._run_original = original
            self._xlac._run_cached_graph = _run_cached_graph
        self._hook_contexts()
        self.active = True
        return self

    def _hook_contexts(self) -> None:
        """Give every OptimizeContext created from now on our enter/exit hook (torch is
        imported by torch_xla already; a torch without these internals gets no hook)."""
        try:
            from torch._dynamo.eval_frame import OptimizeContext
        except Exception:  # dynamo unavailable or changed: no compiled-call boundaries
            return
        original = OptimizeContext.__init__
        enter = self._enter

        def __init__(context: Any, *args: Any, **kwargs: Any) -> None:
            original(context, *args, **kwargs)
            hooks = getattr(context, "enter_exit_hooks", None)
            if isinstance(hooks, list):
                hooks.append(enter)

        self._context_class, self._init_original = OptimizeContext, original
        OptimizeContext.__init__ = __init__

    def _enter(self) -> Callable[[], None]:
        """Dynamo's enter hook: the call's depth; its cleanup (at return) ends a step when outermost."""
        self._depth += 1
        return self._exit

    def _exit(self) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self.active:
            with contextlib.suppress(Exception):  # tpuscope must never break the user's call
                self._on_return()

    def uninstall(self) -> None:
        self.active = False
        if self._run_original is not None:
            self._xlac._run_cached_graph = self._run_original
            self._run_original = None
        if self._context_class is not None:
            self._context_class.__init__ = self._init_original
            self._context_class = None
