"""One run's life, the same for every way in: open the run, collect, close it, finish it.

`tpuscope run` (launch/program.py) collects in a child process; `tpuscope.profile()` and a
pytest watch collect in this process (`collect_here` / `stop_here`). All three open the run
with `open_run`, record its end with `close_run` and finish it with `finish_run` (device view,
merged parts, detect/run_analysis.py's analysis, shipping), so a run says the same things
however it was made.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuscope.store import RunStore, layout
from tpuscope.store.location import Location
from tpuscope.store.run import Run

if TYPE_CHECKING:
    from tpuscope.detect.run_analysis import RunReport
    from tpuscope.launch.env import ProcessSettings


def open_run(root: str | Path | RunStore | None, name: str, warmup: int, **meta: Any) -> Path:
    """A new run folder whose meta says it is running, from where and since when."""
    store = root if isinstance(root, RunStore) else RunStore(root)
    fields = {"cwd": os.getcwd(), "warmup": warmup, "start_ns": time.time_ns(), "status": "running"}
    return store.new_run(name, **{**fields, **meta})


def close_run(run_dir: Path, status: str, error: str | None = None, **fields: Any) -> None:
    """Record how the run ended (status, error, end time and whatever the caller adds)."""
    Run(run_dir).update_meta(status=status, error=error, end_ns=time.time_ns(), **fields)


def collect_here(
    root: str | Path | None, name: str, warmup: int, settings: ProcessSettings, **meta: Any
) -> Path:
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


@dataclass
class Ending:
    """How a run's end went. `where` the run is kept once shipped; `run` what the analysis read
    (its tables cached: a watch keeps them); `report` the analysis (None when skipped or failed);
    `skipped` why it was not analysed ("no rows": the program ran no backend step; "hosts
    running": a pod whose other hosts still run, named in `running`); `error` a failure of the
    analysis or of showing it (Ctrl-C included), which each caller says its own way."""

    run_dir: Path
    where: Path | Location
    run: Run | None = None
    report: RunReport | None = None
    skipped: str | None = None
    running: list[str] = field(default_factory=list)
    error: BaseException | None = None


def finish_run(
    run_dir: Path,
    *,
    analysis: bool | None = True,
    compact: bool = True,
    pod_host: str | None = None,
    store: RunStore | None = None,
    show: Callable[[Ending], None] | None = None,
) -> Ending:
    """The end of every run once its processes stopped writing (`tpuscope run`, profile(), a
    pytest watch): the device view its traces and dumps give, its parts merged, the analysis,
    `show` (the caller's words on it), then the run shipped to its object store.

    analysis: True always; False never; None only when it is worth it: a run without rows is
    not analysed (loading the analysis stack would be most of `tpuscope run python -c pass`),
    nor a pod whose other hosts still run (the last host to end analyses it). A pod's host
    (`pod_host`) merges only its own parts and ships before the analysis, which reads the pod
    where all its hosts write. A failure of the analysis or of `show` ends in `Ending.error`,
    never before the run is shipped."""
    ingest_device_view(run_dir)
    if compact:
        compact_parts(run_dir, pod_host)
    ending = Ending(run_dir=run_dir, where=run_dir)
    if pod_host is not None:
        ending.where = _ship(run_dir, store)
    try:
        _analyse(ending, analysis)
        if show is not None:
            show(ending)
    except (Exception, KeyboardInterrupt) as exc:
        ending.error = exc
    finally:
        if pod_host is None:
            ending.where = _ship(run_dir, store)
    return ending


def _analyse(ending: Ending, analysis: bool | None) -> None:
    from tpuscope.store.buffer import has_parts
    from tpuscope.store.pods import hosts_running

    if analysis is False:
        return
    if analysis is None and not has_parts(ending.where):
        ending.skipped = "no rows"
    elif analysis is None and (running := hosts_running(ending.where)):
        ending.skipped, ending.running = "hosts running", running
    else:
        from tpuscope.detect.run_analysis import analyze

        ending.run = Run(ending.where)
        ending.report = analyze(ending.run)


def _ship(run_dir: Path, store: RunStore | None) -> Path | Location:
    """Where the run is once shipped (store/ship.py); the store's own door when known, which
    for a local store imports no shipper (nor pyarrow)."""
    if store is not None:
        return store.close_run(run_dir)
    from tpuscope.store.ship import finish_shipping

    return finish_shipping(run_dir)


def compact_parts(run_dir: Path, host: str | None = None) -> None:
    """A handful of files per table for every reader; a run without rows has nothing to merge
    (and then never imports pyarrow: `tpuscope run python -c pass` stays cheap). A pod's host
    merges only its own parts (the others may still be appending theirs): one merged part
    per host per table."""
    from tpuscope.store.buffer import has_parts

    if has_parts(run_dir):
        from tpuscope.store.ship import host_tag

        Run(run_dir).compact(host_tag(), host=host)


def ingest_device_view(run_dir: Path) -> None:
    """Traces and HLO dumps the program left become tables; a failure here never loses the run."""
    if not ((run_dir / layout.TRACE).is_dir() or (run_dir / layout.HLO).is_dir()):
        return  # nothing to read: skip importing the readers
    from tpuscope.ingest.device import ingest_run

    try:
        notes = ingest_run(run_dir)
    except Exception as exc:  # the run is complete without its device view
        notes = [f"device view not ingested: {type(exc).__name__}: {exc}"]
    for note in notes:
        print(f"tpuscope: {note}", file=sys.stderr)
