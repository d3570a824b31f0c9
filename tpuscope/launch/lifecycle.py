"""One run's life, the same for every way in: open the run, collect, close it.

`tpuscope run` (launch/program.py) collects in a child process; `tpuscope.profile()` and a
pytest watch collect in this process (`collect_here` / `stop_here`). All three open the run
with `open_run` and record its end with `close_run`, so a run's meta says the same things
however it was made; the analysis that follows is always detect/run_analysis.py's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuscope.store import RunStore
from tpuscope.store.run import Run

if TYPE_CHECKING:
    from tpuscope.launch.env import ProcessSettings


def open_run(root: str | Path | RunStore | None, name: str, warmup: int, **meta: Any) -> Path:
    """A new run folder whose meta says it is running, from where and since when."""
    store = root if isinstance(root, RunStore) else RunStore(root)
    fields = {"cwd": os.getcwd(), "warmup": warmup, "start_ns": time.time_ns(), "status": "running"}
    return store.new_run(name, **{**fields, **meta})


def close_run(run_dir: Path, status: str, error: str | None = None, **fields: Any) -> None:
    """Record how the run ended (status, error, end time and whatever the caller adds)."""
    Run(run_dir).update_meta(status=status, error=error, end_ns=time.time_ns(), **fields)


def collect_here(root: str | Path | None, name: str, warmup: int, settings: ProcessSettings,
                 **meta: Any) -> Path:
    """Open a run and collect into it in this process (profile(), a watch).

    `settings` are this process's (launch/env.prepare): the PT_XLA_DEBUG file torch_xla
    writes and the HLO dump folder, shown to the collector as XLA reads them."""
    from tpuscope.collect import autostart  # this process collects: hooks and session

    run_dir = open_run(root, name, warmup, env_set=dict(settings.set_vars), **meta)
    with settings.exposed():
        autostart.start(run_dir, warmup=warmup, install_handlers=False, debug_file=settings.file)
    return run_dir


def stop_here(run_dir: Path, status: str, error: str | None, settings: ProcessSettings) -> None:
    """Stop collecting in this process, record the end, and give back the variables tpuscope
    set once torch_xla has read them (a program started later must not inherit them)."""
    from tpuscope.collect import autostart

    try:
        autostart.stop(status=status, error=error, close_open_step=True)
        close_run(run_dir, status, error)
    finally:
        settings.release_if_read()
