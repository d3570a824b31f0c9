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
- a loader's first sync of a pass (the first `next()` of a new `iter(loader)`, before it
  handed out any batch of that pass) ends no iteration of it: work since the last step
  (an eval's `correct.item()` and `xm.mesh_reduce` between epochs) is not an iteration, and
  goes into the next step ("MpDeviceLoader start"; corpus_xla_mnist.py, corpus_xla_mesh_reduce.py).
Setup syncs before the loop (moving a model, `xm.broadcast_master_param`) end a step here when
they launched something (in eager mode `.to(device)` runs ops); the analysis, which sees the
whole stream, tells them apart from the loop's steps (analyze/judge.phases).

Loops that are not the program's own (issue 26: N iterations are N steps whichever idiom
ends them):
- syncs made *inside* a call never end a step: `xm.rendezvous` / `xm.mesh_reduce` sync
  three times per call (torch_xla's `xla_rendezvous`), and dynamo's openxla bridge syncs
  while it traces a function; their work belongs to the step that made the call;
- `torch.compile(fn, backend="openxla")`: after tracing, a call runs its cached graphs
  (`_run_cached_graph`) and passes no sync at all, so the collector makes the return of
  the outermost compiled call a boundary ("torch.compile"), and counts those graph runs
  as launched work (they move no compile-cache counter);
- a framework that owns the loop (Hugging Face `Trainer` + accelerate's `MpDeviceLoader`)
  passes boundaries of its own on some iterations only (the logging pass's
  `xm.mark_step()`, the flush after the loop). A boundary whose caller is a library (the
  first frame outside torch, torch_xla and the standard library is not the user's) ends
  a step only if the optimizer stepped since the last step, once the program has stepped
  an optimizer at all: a training iteration is one optimizer step. Boundaries in the
  user's own code are never held back (an eval loop has no optimizer step); torch_xla 2.9's
  `xm.mark_step` is wrapped by typing_extensions' `@deprecated`, a frame of no library
  (user_files.is_plumbing), so the user's `xm.mark_step()` is the user's boundary.
- a library function that runs a device loop itself (transformers' `generate()`: no sync) is
  one iteration per call: its return is a boundary ("generate", library_loops.py); the
  program's first boundary after such a step (a sync after the call, which runs the outputs'
  pending graph) gives way, so a call is one step whether or not the program syncs after it.
- a loop that passes no sync at all (its device work runs at its value reads: `loss.item()`,
  `print(t)`, `.cpu()`) is one iteration per optimizer step: an optimizer step ends a step
  ("optimizer.step") when the same optimizer stepped before with no sync since; the first
  optimizer seen doing so is the marker, and only its steps end steps (a GAN steps two
  optimizers per iteration). So the first optimizer step ends none (the interval up to the
  second holds the first iteration), and the work after the last one is the last iteration
  ("after the last optimizer.step", never the after-the-loop "end"): N optimizer steps are N
  steps whether the reads come before or after them. A step it ends needs no work launched (an
  iteration without a read launches nothing). A program that syncs in its loop passes a sync
  between any two steps of one optimizer, so its optimizer steps never end a step. A loop with
  neither a sync nor an optimizer step (an inference loop that only reads values) has no step
  marker: it is one step, and the analysis says so (detect/host_sync).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from tpuscope.schema_consts import LAST_ITERATION_BOUNDARY, OPTIMIZER_BOUNDARY
from tpuscope.user_files import is_plumbing, is_user_file

COMPILE_PRELUDE = "torch_xla.compile prelude"
COLLECTIVE = "rendezvous"  # xm.rendezvous / xm.mesh_reduce's own syncs
DYNAMO_TRACE = "dynamo trace"  # the openxla bridge's syncs while it traces a function
DYNAMO_CALL = "torch.compile"  # the return of a torch.compile'd function (collector.py)
LIBRARY_CALL = (
    "generate"  # the return of a library loop call: transformers' generate() (library_loops.py)
)
OPTIMIZER = OPTIMIZER_BOUNDARY  # an optimizer step in a loop that passes no sync (module doc)
LAST_ITERATION = LAST_ITERATION_BOUNDARY  # such a loop's end: its last iteration's reads
WITHIN_A_CALL = (COMPILE_PRELUDE, COLLECTIVE, DYNAMO_TRACE)  # never end a step
LOADER = "MpDeviceLoader"
LOADER_START = "MpDeviceLoader start"  # a loader's first sync of a pass: never ends a step
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
    "xla_rendezvous": COLLECTIVE,
    "extract_graph_helper": DYNAMO_TRACE,
    "extract_compiled_graph_helper": DYNAMO_TRACE,
    "sync": "sync",
}
_MAX_FRAMES = 16
_LOADER_FILE = "parallel_loader.py"
# the PerDeviceLoader of every pass that already synced (torch_xla makes one per iter(loader))
_PASSES: weakref.WeakSet[Any] = weakref.WeakSet()


def _loader_boundary(frame: Any) -> str:
    """LOADER_START when this `PerDeviceLoader.next` frame is its pass's first sync, else LOADER.
    Reads the frame's locals: only at loader boundaries, a few us."""
    if not frame.f_code.co_filename.endswith(_LOADER_FILE):
        return LOADER
    try:
        loader = frame.f_locals.get("self")
        if loader is None or loader in _PASSES:
            return LOADER
        _PASSES.add(loader)
    except TypeError:  # not weak-referenceable: judged as any loader boundary
        return LOADER
    return LOADER_START


# What the walk needs of a frame, by its code object (a dict lookup instead of string tests and
# two cached path rules per frame: the walk runs at every step): its kind and, for torch_xla's
# frames, the API its function name stands for.
_TORCH_XLA, _PLUMBING, _USER, _LIBRARY = range(4)
_CODES: dict[Any, tuple[int, str | None]] = {}
_MAX_CODES = 4096  # a program's code objects that reach a step boundary: far fewer


def _code_kind(code: Any) -> tuple[int, str | None]:
    filename = code.co_filename
    if "torch_xla" in filename:
        return _TORCH_XLA, _BOUNDARY_FRAMES.get(code.co_name)
    if is_plumbing(filename):
        return _PLUMBING, None
    return (_USER if is_user_file(filename) else _LIBRARY), None


def boundary_name(depth: int = 2) -> tuple[str, bool]:
    """(the API that called `torch_xla.sync`, whether a library called it), looking from
    `depth` frames above this call. Only torch_xla's own frames name the API (a user's
    `__exit__` or `next` that syncs is a plain sync); the caller is the first frame outside
    torch_xla and the standard library."""
    frame: Any = sys._getframe(depth)
    name = "sync"
    codes = _CODES
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        code = frame.f_code
        kind = codes.get(code)
        if kind is None:
            if len(codes) >= _MAX_CODES:
                codes.clear()
            kind = codes[code] = _code_kind(code)
        if kind[0] == _TORCH_XLA:
            found = kind[1]
            if found and found != "sync" and name == "sync":
                name = _loader_boundary(frame) if found == LOADER else found
        elif kind[0] != _PLUMBING:
            return name, kind[0] == _LIBRARY
        frame = frame.f_back
    return name, False


def library_caller(depth: int = 2) -> bool:
    """Whether the first frame `depth` above this call that is outside torch, torch_xla and
    the standard library is a library's (not the user's code)."""
    frame: Any = sys._getframe(depth)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        filename = frame.f_code.co_filename
        if not (is_plumbing(filename) or "/torch/" in filename or "torch_xla" in filename):
            return not is_user_file(filename)
        frame = frame.f_back
    return False


class StepRule:
    """Decides at each boundary whether a step ended, and how many graphs it launched, from
    the compile-cache lookups and executions counted since the last step."""

    def __init__(self, counters: dict[str, int]) -> None:
        # launched but not yet counted as executed (async executions in flight)
        self.outstanding = max(
            0, sum(counters.get(n, 0) for n in LOOKUPS) - counters.get(EXECUTED, 0)
        )
        self._own_boundary = (
            True  # the program's own sync since the last loader boundary (setup counts)
        )
        self._yielded_at: int | None = None  # lookups when a loader boundary last gave way
        self.optimizer_steps = 0  # optimizer.step() calls so far (the collector's post-hook)
        self._optimizer_steps_at_end = 0  # ... when the last step ended
        self._library_step = False  # the last step ended at a library loop call's return
        # optimizers stepped since the last sync, and the one whose steps mark a loop with no
        # sync (weak: an optimizer made anew per epoch frees the old one, and its place)
        self._stepped_since_sync: weakref.WeakSet[Any] = weakref.WeakSet()
        self._marker: weakref.ref[Any] | None = None
        self._marking = False  # the marker ended a step since the last sync (may be freed now)
        self._in_compile = False  # between torch_xla.compile's prelude and its exit: one step

    def optimizer_stepped(self, optimizer: object) -> bool:
        """Count an optimizer step; True if it ends a step: the same optimizer stepped before
        with no sync since, so the loop passes no sync; the first optimizer seen doing so is
        the marker, whose steps alone end steps (a GAN steps two per iteration)."""
        self.optimizer_steps += 1
        if self._in_compile:  # a compiled step's optimizer steps are inside its one step
            return False
        try:
            marker = self._marker() if self._marker is not None else None
            marks = optimizer in self._stepped_since_sync and marker in (None, optimizer)
            if marks and marker is None:
                self._marker = weakref.ref(optimizer)
            self._marking = self._marking or marks
            self._stepped_since_sync.add(optimizer)
        except TypeError:  # not weak-referenceable: it marks no loop
            return False
        return marks

    def end_boundary(self) -> str:
        """The boundary of the work after the program's last boundary: in a loop marked by its
        optimizer steps (no sync since the marker ended a step), its last iteration, else the
        after-the-loop "end". Asked at the close, when the program's optimizer may be freed."""
        return LAST_ITERATION if self._marking else END

    def _loader_gives_way(self, lookups: int) -> bool:
        """The loader's sync is the top of the next iteration: the program synced itself since
        the previous loader boundary, or that one gave way and nothing launched since (the
        loader syncs twice on its way to StopIteration)."""
        gives_way = self._own_boundary or self._yielded_at == lookups
        self._own_boundary = False
        self._yielded_at = lookups if gives_way else None
        return gives_way

    def end(
        self,
        boundary: str,
        lookups_now: int,
        lookups: int,
        executed: int,
        other_work: bool,
        library: bool = False,
        direct: int = 0,
    ) -> int | None:
        """The graphs launched since the last step if this boundary ends one, else None (the
        interval goes on); `lookups_now`: the lookup counters' total, `other_work`: an `aten::*`
        counter or the host-transfer metric moved, `library`: a library called the boundary,
        `direct`: graphs run outside the lazy executor (dynamo's cached graphs). Graphs
        launched: compile-cache lookups, plus executions beyond them and the ones still in
        flight, plus `direct`. One flat call: on the caches a step leaves, each Python call
        costs about 1 us."""
        marked = boundary in (OPTIMIZER, LAST_ITERATION)
        if not marked and boundary != END:
            self._stepped_since_sync.clear()
            self._marking, self._in_compile = False, boundary == COMPILE_PRELUDE
        elif boundary == LAST_ITERATION:
            self._stepped_since_sync.clear()  # recorded once (profile() closes twice)
            self._marking = False
        if boundary in WITHIN_A_CALL:
            return None
        if self._library_step and boundary not in (LIBRARY_CALL, END):
            # the program's first boundary after a library loop call (a sync that runs the
            # outputs' pending graph) is inside that iteration: its work goes into the next step
            self._library_step = False
            return None
        if boundary == LOADER_START:  # the top of a pass: what ran since goes into the next step
            self._own_boundary, self._yielded_at = False, None
            return None
        if boundary == LOADER:
            if self._loader_gives_way(lookups_now):
                return None
        elif boundary != END:
            self._own_boundary, self._yielded_at = True, None
        launched = lookups + max(0, executed - lookups - self.outstanding) + direct
        if not (launched or other_work or marked):  # an optimizer step is an iteration
            return None
        if (
            library
            and boundary != END
            and self.optimizer_steps
            and self.optimizer_steps == self._optimizer_steps_at_end
        ):
            return None  # a framework's boundary inside its training iteration (module doc)
        self._optimizer_steps_at_end = self.optimizer_steps
        self._library_step = boundary == LIBRARY_CALL
        self.outstanding = max(0, self.outstanding + lookups - executed)
        return launched
