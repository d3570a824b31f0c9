"""The user's line for CPU fallbacks and device-to-host reads, traced only briefly.

torch_xla counts fallbacks (a counter per op, in every namespace: `aten::nonzero`,
`torchvision::nms`, a custom op's; parse/xla_counter_names.is_fallback_counter) and host
reads (TransferFromDeviceTime samples) but never says where they came from. Tracing every torch call to find out
would tax every step, so tracing is armed only when something new shows up at a
step boundary: a fallback counter never located before, or a step with more host
reads than any traced step had. For the next WINDOW steps (doubled each time the same
thing shows up again untraced, so an op that runs every 4th step is still caught) a
TorchFunctionMode wraps
each torch call (the calls the user's code makes: `x[mask]`, `.item()`, `print(t)`,
`loss.backward()`), reads the watched counters before and after it (about 1 us each),
and when one moved, walks the Python stack to the user's frame (collect/frames: the
first frame outside installed packages, the standard library and tpuscope) and keeps
the innermost library frame inside that call too (`transformers/generation/utils.py:N`
for a read inside `model.generate(...)`, `torch/nn/utils/clip_grad.py:N` for one
inside torch). Counting around the outermost call is what makes this work
for ops that fall back deep inside a lowering (`x[mask]` runs `aten::nonzero` from
the C++ index kernel, never visible as a call of its own).

Cost while armed: ~11 us of CPU per torch call (+10% CPU on the tiny transformer step,
measured in docs/detectors.md); unarmed: nothing. At most MAX_ARMED_STEPS steps per
process are traced, and none once torch.compile has compiled a frame (a mode on the
stack would change its guards and make it retrace).
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from types import FrameType
from typing import Any

from tpuscope.collect.frames import user_and_library
from tpuscope.collect.xla.counters import COPY_COUNTERS
from tpuscope.collect.xla.counters import HOST_TRANSFER as TRANSFER_METRIC
from tpuscope.schema_rows import CallSiteRow, FallbackRow

# torch's own Python (`torch._check_tensor_all`'s `.item()`, `F.*` wrappers) is never the line a
# read or a fallback is to be found at: the library frame is the innermost one outside it (the
# model code that called torch), None when the user's line called torch itself
TORCH_INTERNALS = ("/torch/",)
WINDOW = 2
MAX_ARMED_STEPS = 12
MAX_WATCHED_OPS = 8
HOST_SYNC_OPS = ("aten::_local_scalar_dense",)  # a value read, not a missing lowering


def _dynamo_in_use() -> bool:
    """torch.compile has compiled frames: tracing would change what it guards on."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    return bool(counters and counters["frames"].get("ok"))


def _mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class _SiteMode(TorchFunctionMode):
        """Counts host round-trips per torch call while armed."""

        def __init__(self, tracer: SiteTracer) -> None:
            super().__init__()
            self.tracer = tracer

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            # Counters move only inside torch calls, and calls reach this handler one at a
            # time (nested ones run with the mode off), so the reading after the previous
            # call is this call's "before": one read per call instead of two.
            tracer = self.tracer
            before = tracer.last
            try:
                out = func(*args, **(kwargs or {}))
            finally:
                tracer.last = after = tracer.read()
            if after != before:
                tracer.record(func, before, after, sys._getframe(1))
            return out

    return _SiteMode


class SiteTracer:
    """Arms a TorchFunctionMode for a few steps when a new host round-trip appears."""

    def __init__(self, xlac: Any) -> None:
        self._xlac = xlac
        self._ops: list[str] = []  # fallback counters watched (any namespace), newest last
        self._located: set[str] = set()  # ops that had at least one traced step
        self._max_reads = 0  # most host reads seen in a traced step
        self._left = 0  # armed steps left in the current window
        self._window = WINDOW  # length of the next window (doubles on a miss)
        self._want_reads = False  # armed for host reads not traced yet
        self.armed_steps = 0
        self._mode: Any = None
        self._thread = 0
        # (op or torch function, user's file:line, library frame) -> count
        self.fallback_sites: Counter[tuple[str, str | None, str | None]] = Counter()
        self.read_sites: Counter[tuple[str, str | None, str | None]] = Counter()
        self._known_transfers = 0  # TransferFromDeviceTime samples when last read
        self.last: tuple[int, ...] = ()  # counters after the previous traced call

    # -- inside the mode ----------------------------------------------------------
    def read(self) -> tuple[int, ...]:
        """The copy counters and the watched aten counters (about 0.7 us each).

        Reading TransferFromDeviceTime itself around every call would copy its sample
        buffer each time; every device-to-host read moves `xla::_to_cpu` or
        `xla::_to_copy`, so the metric is read only when one of those moved.
        """
        value = self._xlac._xla_counter_value  # None until the counter first moves
        return (
            *(value(name) or 0 for name in COPY_COUNTERS),
            *(value(op) or 0 for op in self._ops),
        )

    def _transfers(self) -> int:
        data = self._xlac._xla_metric_data(TRANSFER_METRIC)
        return int(data[0]) if data else 0

    def record(
        self, func: Any, before: tuple[int, ...], after: tuple[int, ...], frame: FrameType
    ) -> None:
        where, library = user_and_library(frame, TORCH_INTERNALS)
        name = getattr(func, "__name__", None) or str(func)
        copies = len(COPY_COUNTERS)
        if after[:copies] != before[:copies]:
            now = self._transfers()
            if now > self._known_transfers:
                self.read_sites[(name, where, library)] += now - self._known_transfers
            self._known_transfers = now
        for op, old, new in zip(self._ops, before[copies:], after[copies:], strict=True):
            if new > old:
                self.fallback_sites[(op, where, library)] += new - old

    # -- at step boundaries -------------------------------------------------------
    @property
    def armed(self) -> bool:
        return self._mode is not None

    @property
    def idle(self) -> bool:
        """Neither armed nor due to arm: a step without fallbacks or host reads changes nothing
        (the step hook then skips on_step_end)."""
        return self._mode is None and self._left <= 0

    def on_step_end(
        self, fallback_ops: dict[str, int], reads: int
    ) -> tuple[Counter, Counter] | None:
        """Sites seen in the step that just ended (None if it was not traced); re-arm or disarm."""
        traced = None
        if self.armed:
            traced = (self.fallback_sites, self.read_sites)
            self.fallback_sites, self.read_sites = Counter(), Counter()
            self._located.update(op for op in fallback_ops if op in self._ops)
            self._max_reads = max(self._max_reads, reads)
            self._want_reads = self._want_reads and not traced[1]
            self._left -= 1
            if set(self._ops) <= self._located and not self._want_reads:
                self._left = 0  # everything it was armed for has a call site
        unlocated = [op for op in fallback_ops if op not in self._located]
        more_reads = reads > self._max_reads and traced is None
        if unlocated or more_reads:
            self._ops = (self._ops + [op for op in unlocated if op not in self._ops])[
                -MAX_WATCHED_OPS:
            ]
            self._want_reads = self._want_reads or more_reads
            if traced is None:  # it happened while unarmed: arm, longer each time
                self._left, self._window = max(self._left, self._window), self._window * 2
            else:
                self._left = max(self._left, 1)
        if self._left > 0 and self.armed_steps < MAX_ARMED_STEPS:
            self._arm()
            self.last = (
                self.read()
            )  # the watched list may have grown; the step boundary moved nothing of ours
        else:
            self._disarm()
        return traced

    def _arm(self) -> None:
        if self._mode is None and _dynamo_in_use():
            return  # a mode on the stack would make torch.compile guard-fail and retrace
        if self._mode is None:
            self._known_transfers = self._transfers()
            self.last = self.read()
            self._mode = _mode_class()(self)
            self._mode.__enter__()
            self._thread = threading.get_ident()
        self.armed_steps += 1

    def _disarm(self) -> None:
        """Pop the mode if it is on top of this thread's stack (never pop someone else's)."""
        self._left = 0
        if self._mode is None or threading.get_ident() != self._thread:
            return
        import torch

        depth = torch._C._len_torch_function_stack()
        if depth and torch._C._get_function_stack_at(depth - 1) is self._mode:
            torch._C._pop_torch_function_stack()
            self._mode = None

    def close(self) -> None:
        self._disarm()


def site_rows(
    step: int, fallback_ops: dict[str, int], traced: tuple[Counter, Counter] | None
) -> tuple[list[FallbackRow], list[CallSiteRow]]:
    """Rows of `fallbacks` (one per op and located call site) and `call_sites` (host reads).

    Counts the tracer could not place (an op run by the autograd engine's thread)
    stay in a row with no location, so per-op totals always equal torch_xla's counters.
    """
    from tpuscope.schema import table_row  # the flush thread: pyarrow is loaded by now

    fallback_sites, read_sites = traced if traced is not None else (Counter(), Counter())
    fallbacks: list[FallbackRow] = []
    for op, count in fallback_ops.items():
        placed = 0
        for (site_op, where, library), n in sorted(fallback_sites.items(), key=lambda kv: -kv[1]):
            n = min(n, count - placed)
            if site_op != op or (where is None and library is None) or n <= 0:
                continue
            fallbacks.append(
                table_row(
                    "fallbacks", step=step, op=op, count=n, location=where, library_frame=library
                )
            )
            placed += n
        if count > placed:
            fallbacks.append(table_row("fallbacks", step=step, op=op, count=count - placed))
    reads = [
        table_row(
            "call_sites",
            step=step,
            kind="host_sync",
            name=name,
            location=where,
            library_frame=library,
            count=n,
        )
        for (name, where, library), n in read_sites.items()
    ]
    return fallbacks, reads
