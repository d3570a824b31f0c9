"""Which steps to trace with the backend's profiler, and where the xplane files go.

`tpuscope run --trace-steps 10:20` passes the window to every process of the run as
TPUSCOPE_TRACE_STEPS ("START:STOP", steps START..STOP-1, or "N" for one step). By default
`tpuscope run` passes "auto": on a TPU, the AUTO_STEPS steps right after the warm-up (steps
warmup+1 .. warmup+AUTO_STEPS) are traced, so TensorCore verdicts and costs come from the
device's own op times, not from an estimate; on any other device nothing is traced. "off"
traces nothing. Collectors start their profiler when step START opens and stop it when step
STOP-1 closes, each outside the steps' times: a step opens after the profiler's start
returned and the step after the window opens after its stop returned, so no step time holds
the profiler's own seconds (they are the session's `profiler_ns`, stated in the report). The
profilers write `<dir>/plugins/profile/<time>/<host>.xplane.pb` under
`<run>/trace/<backend>-<host>-<pid>/`, which the xplane ingester reads.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuscope.store import layout
from tpuscope.store.hosts import file_host

ENV_TRACE_STEPS = "TPUSCOPE_TRACE_STEPS"
AUTO, OFF = "auto", "off"
AUTO_STEPS = 5  # steps an automatic window traces: enough for a median, a few MB of trace


@dataclass(frozen=True)
class StepWindow:
    """Steps start .. stop-1 are traced; `auto`: only where the program runs on a TPU."""

    start: int
    stop: int
    auto: bool = False

    def __contains__(self, step: int) -> bool:
        return self.start <= step < self.stop


def parse_window(text: str | None, warmup: int = 2) -> StepWindow | None:
    """'10:20' -> steps 10..19; '5' -> step 5; 'auto' -> AUTO_STEPS steps after the warm-up
    (traced on a TPU only); ''/None/'off' -> no tracing. ValueError if malformed."""
    if not text or not text.strip() or text.strip().lower() == OFF:
        return None
    if text.strip().lower() == AUTO:
        return StepWindow(warmup + 1, warmup + 1 + AUTO_STEPS, auto=True)
    head, sep, tail = text.strip().partition(":")
    try:
        start = int(head)
        stop = int(tail) if sep else start + 1
    except ValueError:
        raise ValueError(f"trace steps must be START:STOP or N, not {text!r}") from None
    if start < 0 or stop <= start:
        raise ValueError(f"trace steps {text!r}: need 0 <= START < STOP")
    return StepWindow(start, stop)


def window_from_env(warmup: int = 2) -> StepWindow | None:
    """The window `tpuscope run --trace-steps` asked for ("auto" by default); a bad value is
    said once, not raised (the launcher validates it, so this only guards a hand-set
    environment variable)."""
    try:
        return parse_window(os.environ.get(ENV_TRACE_STEPS), warmup)
    except ValueError as exc:
        print(f"tpuscope: {exc}; not tracing", file=sys.stderr)
        return None


def trace_dir(run_dir: str | Path, backend: str) -> Path:
    """This process's profiler output folder inside the run."""
    return layout.trace_dir(Path(run_dir), backend, file_host(), os.getpid())


class ProfilerWindow:
    """Starts a backend profiler when the window's first step opens, stops it after its
    last step (or at exit), then reports the xplane files written. A profiler error
    disables tracing with one message; it never stops the program. An automatic window
    traces only where `on_tpu()` says the program's device is a TPU (asked when the window
    opens, once the program has started its runtime). `spent_ns`: the profiler's own start
    and stop time, which the collector keeps out of every step; `stop_ns`, the stop's part of
    it, and `waited_ns`, the part of the stop a collector spent waiting for the device to
    finish the window's steps before stopping (the rest is the profiler collecting and
    writing its events: 13 s for a ResNet-50's 5 steps on a v5e, with 2 million events)."""

    def __init__(
        self,
        window: StepWindow,
        directory: Path,
        start: Callable[[str], Any],
        stop: Callable[[], Any],
        on_files: Callable[[list[str]], None],
        on_tpu: Callable[[], bool] | None = None,
    ) -> None:
        self.window, self.directory = window, directory
        self._start, self._stop, self._on_files = start, stop, on_files
        self._on_tpu = on_tpu
        self.active = False
        self.failed = False
        self.done = False  # started and stopped, or never will start
        self.traced = False  # the profiler ran (a window that never started has no files)
        self.yielded = False  # the program started its own profiler: this window never restarts
        self._superseded = False  # restarted: the first trace's files go when the next starts
        self.spent_ns = 0
        self.stop_ns = 0
        self.waited_ns = 0  # set by a `stop` that waits for the device first

    def step_opened(self, step: int) -> bool:
        """True when the profiler started now (the step opens after it): at the window's first
        step, or the first step inside it that the hooks see open (step 0 opens and closes in
        one call of a jitted step)."""
        if self.active or self.done or not self.window.start <= step < self.window.stop:
            return False
        if self.window.auto and not self._auto_applies():
            self.done = True
            return False
        began = time.perf_counter_ns()
        try:
            if self._superseded:  # (kept until now: a window that never opens keeps them)
                shutil.rmtree(self.directory, ignore_errors=True)
                self._superseded = False
            self.directory.mkdir(parents=True, exist_ok=True)
            self._start(str(self.directory))
            self.active = self.traced = True
        except Exception as exc:
            self._fail(exc)
        self.spent_ns += time.perf_counter_ns() - began
        return self.active

    def restart(self, start: int) -> bool:
        """Trace AUTO_STEPS steps from `start` again: an automatic window whose steps the
        collector no longer counts as the loop's (its step function changed after them: an
        evaluation before the training loop). The first trace's files are removed when the
        new window starts (they hold those other steps; until then they are the run's trace);
        the caller has counted its time. False where nothing is to trace again: the user's own
        window, a window still open or to come, none traced, or the program's own profiler
        started since."""
        if not (self.window.auto and self.done and self.traced) or self.failed or self.yielded:
            return False
        self._superseded = True
        self.window = StepWindow(start, start + AUTO_STEPS, auto=True)
        self.done = self.traced = False
        self.spent_ns = self.stop_ns = self.waited_ns = 0
        return True

    @property
    def untaken(self) -> bool:
        """An automatic window that never traced a step: none of its steps came (a run of at
        most warm-up + 1 steps, or of one long jitted call). A window moved after it traced
        keeps its files."""
        return self.window.auto and not (
            self.traced or self._superseded or self.failed or self.yielded
        )

    def applies(self) -> bool:
        """Whether an automatic window traces this program: it runs on a TPU."""
        return self._auto_applies()

    def _auto_applies(self) -> bool:
        try:
            return self._on_tpu is not None and bool(self._on_tpu())
        except Exception:  # a device query never breaks the program
            return False

    def step_closed(self, step: int) -> bool:
        """True when the profiler stopped now (after the window's last step)."""
        if self.active and step >= self.window.stop - 1:
            self.close()
            return True
        return False

    def close(self) -> None:
        if not self.active:
            return
        self.active = False
        self.done = True
        began = time.perf_counter_ns()
        try:
            self._stop()
        except Exception as exc:
            self._fail(exc)
        self.stop_ns = time.perf_counter_ns() - began
        self.spent_ns += self.stop_ns
        self._on_files([str(path) for path in layout.xplane_files(self.directory)])  # run meta

    def _fail(self, exc: Exception) -> None:
        self.failed = self.done = True
        print(
            f"tpuscope: trace of steps {self.window.start}:{self.window.stop} failed: {exc}",
            file=sys.stderr,
        )
