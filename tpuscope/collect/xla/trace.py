"""`tpuscope run --trace-steps A:B` for torch_xla: a PJRT profiler trace of exactly steps A..B-1.

torch_xla's profiler (`torch_xla.debug.profiler`) records host TraceMe events and,
on a TPU, the device's XLA ops, into an xplane.pb. The XLA collector calls
`step_ended` at every step boundary; the trace starts when step A opens (right after
step A-1's sync) and stops when step B-1 has ended. torch_xla executes a step's graph
asynchronously after its sync returns, so the stop first waits for the device
(`xm.wait_device_ops()`) to keep step B-1's execution in the trace. A profiler server
is started too (`xp.start_server` on a free port, in the run's meta), so xprof or
TensorBoard can also capture from the live program. The file lands under
`<run>/trace/xla-<host>-<pid>/plugins/profile/<time>/<host>.xplane.pb` and
`tpuscope run` ingests it when the program ends.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
from pathlib import Path
from typing import Any

from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow, StepWindow, trace_dir, window_from_env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class XlaTrace:
    """The profiler window of one torch_xla process."""

    def __init__(self, session: Session, steps: StepWindow, directory: Path) -> None:
        self.session = session
        self.window = ProfilerWindow(
            steps,
            directory,
            self.start,
            self.stop,
            lambda files: session.set_meta(trace_files=files),
            lambda: True,  # attached for an automatic window only with PJRT_DEVICE=TPU
        )
        self._server: Any = None

    def start(self, directory: str) -> None:
        import torch_xla.debug.profiler as xp

        if self._server is None:
            port = _free_port()
            try:
                self._server = xp.start_server(port)
                self.session.set_meta(profiler_port=port)
            except Exception as exc:  # the trace works without the server
                print(f"tpuscope: profiler server not started: {exc}", file=sys.stderr)
                self._server = False
        xp.start_trace(directory)

    @staticmethod
    def stop() -> None:
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.profiler as xp

        try:
            xm.wait_device_ops()
        finally:
            xp.stop_trace()

    def step_ended(self, next_step: int) -> None:
        """Step next_step-1 ended and next_step opens."""
        self.window.step_closed(next_step - 1)
        self.window.step_opened(next_step)


def attach(session: Session) -> XlaTrace | None:
    """An XlaTrace if TPUSCOPE_TRACE_STEPS asks for one ("auto": only with PJRT_DEVICE=TPU,
    the device torch_xla will run on); step 0 opens now."""
    steps = window_from_env(session.warmup)
    if steps is None or (steps.auto and os.environ.get("PJRT_DEVICE", "").upper() != "TPU"):
        return None
    directory = trace_dir(session.run_dir, "xla")
    trace = XlaTrace(session, steps, directory)
    session.set_meta(trace_steps=[steps.start, steps.stop], trace_dir=str(directory))
    atexit.register(
        trace.window.close
    )  # a program that ends inside the window still gets its trace
    trace.window.step_opened(0)
    return trace
