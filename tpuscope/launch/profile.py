"""`tpuscope.profile()`: profile a block of code in this process (notebooks, tests)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tpuscope.collect import autostart
from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run, RunStore, update_meta


def _enable_debug_text() -> bool:
    """Turn PT_XLA_DEBUG on for compile causes, unless the user chose a level themselves.

    torch_xla reads the level when it first needs it, so this helps only when
    nothing has compiled yet in this process; compiles then still get times.
    """
    if "PT_XLA_DEBUG_LEVEL" in os.environ:
        return False
    os.environ["PT_XLA_DEBUG_LEVEL"] = "1"
    return True


@contextmanager
def profile(store: str | Path | None = None, name: str = "profile", warmup: int = 2,
            analyze_at_exit: bool = True) -> Iterator[Run]:
    """Collect every torch_xla step in the block into a new run; yields the Run.

    Example:
        with tpuscope.profile(store="runs", name="sweep") as run:
            train(steps=10)
        print(run.steps, run.findings)
    """
    run_dir = RunStore(store).new_run(
        name, argv=list(sys.argv), command="tpuscope.profile()", cwd=os.getcwd(),
        warmup=warmup, start_ns=time.time_ns(), status="running",
    )
    owns_debug = _enable_debug_text()
    autostart.start(run_dir, warmup=warmup, own_debug=owns_debug, install_handlers=False)
    run = Run(run_dir)
    status, error = "finished", None
    try:
        yield run
    except BaseException as exc:
        status, error = "exception", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        autostart.stop(status=status, error=error)
        if owns_debug:
            os.environ.pop("PT_XLA_DEBUG_LEVEL", None)
            os.environ.pop("PT_XLA_DEBUG_FILE", None)
        update_meta(run_dir, status=status, error=error, end_ns=time.time_ns())
        run.__dict__.clear()
        run.path = run_dir
        if analyze_at_exit:
            analyze(run)
            run.__dict__.pop("findings", None)
