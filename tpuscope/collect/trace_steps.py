"""Which steps to trace with the backend's profiler, and where the xplane files go.

`tpuscope run --trace-steps 10:20` passes the window to every process of the run as
TPUSCOPE_TRACE_STEPS ("START:STOP", steps START..STOP-1, or "N" for one step).
Collectors (jax, torch_tpu) start their profiler when step START opens and stop it
when step STOP-1 closes; the profilers write `<dir>/plugins/profile/<time>/<host>.xplane.pb`
under `<run>/trace/<backend>-<host>-<pid>/`, which the xplane ingester reads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuscope.store import layout
from tpuscope.store.hosts import file_host

ENV_TRACE_STEPS = "TPUSCOPE_TRACE_STEPS"


@dataclass(frozen=True)
class StepWindow:
    """Steps start .. stop-1 are traced."""

    start: int
    stop: int

    def __contains__(self, step: int) -> bool:
        return self.start <= step < self.stop


def parse_window(text: str | None) -> StepWindow | None:
    """'10:20' -> steps 10..19; '5' -> step 5; ''/None -> no tracing. ValueError if malformed."""
    if not text or not text.strip():
        return None
    head, sep, tail = text.strip().partition(":")
    try:
        start = int(head)
        stop = int(tail) if sep else start + 1
    except ValueError:
        raise ValueError(f"trace steps must be START:STOP or N, not {text!r}") from None
    if start < 0 or stop <= start:
        raise ValueError(f"trace steps {text!r}: need 0 <= START < STOP")
    return StepWindow(start, stop)


def window_from_env() -> StepWindow | None:
    """The window `tpuscope run --trace-steps` asked for; a bad value is said once, not raised
    (the launcher validates it, so this only guards a hand-set environment variable)."""
    try:
        return parse_window(os.environ.get(ENV_TRACE_STEPS))
    except ValueError as exc:
        print(f"tpuscope: {exc}; not tracing", file=sys.stderr)
        return None


def trace_dir(run_dir: str | Path, backend: str) -> Path:
    """This process's profiler output folder inside the run."""
    return layout.trace_dir(Path(run_dir), backend, file_host(), os.getpid())


class ProfilerWindow:
    """Starts a backend profiler when the window's first step opens, stops it after its
    last step (or at exit), then reports the xplane files written. A profiler error
    disables tracing with one message; it never stops the program."""

    def __init__(
        self,
        window: StepWindow,
        directory: Path,
        start: Callable[[str], Any],
        stop: Callable[[], Any],
        on_files: Callable[[list[str]], None],
    ) -> None:
        self.window, self.directory = window, directory
        self._start, self._stop, self._on_files = start, stop, on_files
        self.active = False
        self.failed = False

    def step_opened(self, step: int) -> None:
        if self.active or self.failed or step != self.window.start:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._start(str(self.directory))
            self.active = True
        except Exception as exc:
            self._fail(exc)

    def step_closed(self, step: int) -> None:
        if self.active and step >= self.window.stop - 1:
            self.close()

    def close(self) -> None:
        if not self.active:
            return
        self.active = False
        try:
            self._stop()
        except Exception as exc:
            self._fail(exc)
        self._on_files([str(path) for path in layout.xplane_files(self.directory)])  # run meta

    def _fail(self, exc: Exception) -> None:
        self.failed = True
        print(
            f"tpuscope: trace of steps {self.window.start}:{self.window.stop} failed: {exc}",
            file=sys.stderr,
        )
