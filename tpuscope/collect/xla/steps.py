"""Which torch_xla step boundaries end a step, so that a step is one iteration of the program.

Every step idiom of torch_xla 2.9 ends in `torch_xla.sync()`: `xm.mark_step()`,
`xm.optimizer_step(opt, barrier=True)`, `torch_xla.compile` (a sync before the function,
the "prelude", and one after it, for both `torch_xla.compile(fn)` and
`with torch_xla.compile():`), `xp.StepTrace.__exit__`, and `MpDeviceLoader`, whose
`next()` syncs before handing out each batch and once more before StopIteration
(unless a StepTrace just synced). One loop iteration can pass several of them
(loader `next` + compile prelude + compile exit), so a boundary ends a step only when
the step has work that the program *launched* since the last step:

- graphs launched: torch_xla looks every graph it runs up in its compile cache
  (`UncachedCompile` or `CachedCompile`) on the launching thread, eager ops included;
  executions not launched through the cache (ExecuteComputation beyond what was
  launched and not yet run) count too;
- `aten::*` CPU fallbacks and device-to-host reads (`TransferFromDeviceTime` samples).

Measured here (per-boundary deltas of every counter, tests/programs/idioms.py):
`ExecuteComputation` and the `ExecuteTime` sample move when the *asynchronous*
execution finishes, often after the sync returned, so they land at whatever boundary
comes next: counting them as work made an otherwise empty loader `next()` a step
now and then (12 iterations gave 16-18 steps, different in every run). Now they are
the step's metrics only; the `executions` column counts graphs launched in the step.

Which boundary ends an iteration when it passes several:
- the compile prelude never ends a step: it flushes the caller's pending ops, which
  belong to the compiled call's step;
- an `MpDeviceLoader` boundary ends a step only when the loader is the loop's step
  marker: if the program's own boundary (sync, mark_step, optimizer_step, compile,
  StepTrace) ran since the previous loader boundary, the loader's sync is the top of
  the next iteration, and work since (an `.item()` after `mark_step()`) is carried into
  the next step (the last iteration's: into the "end" step, or whatever follows the
  loop). The loader syncs twice on its way to StopIteration: the second gives way too
  when nothing was launched since the first. A loader loop without syncs of its own
  (`xm.optimizer_step(opt)` without barrier) gets one step per `next()`, the last at
  StopIteration. A boundary that gives way leaves its counter and metric reads to the
  next step (the reader re-reads host transfers; a full read is repeated).
Setup syncs before the loop (moving a model, `xm.broadcast_master_param`) are steps of
their own when they launched something (in eager mode `.to(device)` runs ops).
"""

from __future__ import annotations

import sys
from typing import Any

COMPILE_PRELUDE = "torch_xla.compile prelude"
LOADER = "MpDeviceLoader"
END = "end"
LOOKUPS = ("UncachedCompile", "CachedCompile")
EXECUTED = "ExecuteComputation"
# Which public API asked for the step, by the name of a torch_xla frame up the stack.
_BOUNDARY_FRAMES = {
    "optimizer_step": "optimizer_step",
    "mark_step": "mark_step",
    "_clear_pending_ops_before_compile": COMPILE_PRELUDE,
    "_compile": "torch_xla.compile",
    "__exit__": "StepTrace",
    "next": LOADER,
    "sync": "sync",
}


def boundary_name(depth: int = 2) -> str:
    """The API that called `torch_xla.sync`, `depth` frames above this call; only torch_xla's
    own frames count (a user's `__exit__` or `next` that syncs is a plain sync)."""
    frame: Any = sys._getframe(depth)
    name = "sync"
    for _ in range(6):
        if frame is None:
            break
        found = _BOUNDARY_FRAMES.get(frame.f_code.co_name)
        if found and "torch_xla" in frame.f_code.co_filename:
            if found != "sync":
                return found
            name = found
        frame = frame.f_back
    return name


class StepRule:
    """Decides at each boundary whether a step ended, and how many graphs it launched, from
    the compile-cache lookups and executions counted since the last step."""

    def __init__(self, counters: dict[str, int]) -> None:
        # launched but not yet counted as executed (async executions in flight)
        self.outstanding = max(0, sum(counters.get(n, 0) for n in LOOKUPS) - counters.get(EXECUTED, 0))
        self._own_boundary = True  # the program's own sync since the last loader boundary (setup counts)
        self._yielded_at: int | None = None  # lookups when a loader boundary last gave way

    def _loader_gives_way(self, lookups: int) -> bool:
        """The loader's sync is the top of the next iteration: the program synced itself since
        the previous loader boundary, or that one gave way and nothing launched since (the
        loader syncs twice on its way to StopIteration)."""
        gives_way = self._own_boundary or self._yielded_at == lookups
        self._own_boundary = False
        self._yielded_at = lookups if gives_way else None
        return gives_way

    def end(self, boundary: str, lookups_now: int, lookups: int, executed: int, other_work: bool) -> int | None:
        """The graphs launched since the last step if this boundary ends one, else None (the
        interval goes on); `lookups_now`: the lookup counters' total, `other_work`: an `aten::*`
        counter or the host-transfer metric moved. Graphs launched: compile-cache lookups, plus
        executions beyond them and the ones still in flight. One flat call: on the caches a
        step leaves, each Python call costs about 1 us."""
        if boundary == COMPILE_PRELUDE:
            return None
        if boundary == LOADER:
            if self._loader_gives_way(lookups_now):
                return None
        elif boundary != END:
            self._own_boundary, self._yielded_at = True, None
        launched = lookups + max(0, executed - lookups - self.outstanding)
        if not (launched or other_work):
            return None
        self.outstanding = max(0, self.outstanding + lookups - executed)
        return launched
