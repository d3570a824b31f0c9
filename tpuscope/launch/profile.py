"""`tpuscope.profile()`: profile a block of code in this process (notebooks, tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tpuscope.launch import env
from tpuscope.launch.lifecycle import collect_here, finish_run, stop_here
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import Run


@contextmanager
def profile(
    store: str | Path | None = None,
    name: str = "profile",
    warmup: int = DEFAULT_WARMUP,
    analyze_at_exit: bool = True,
    alerts: bool = False,
) -> Iterator[Run]:
    """Collect every step in the block into a new run; yields the Run.

    With `alerts=True`, new recompiles and CPU fallbacks are said on stderr while the block
    runs (tpuscope/launch/alerts/; off by default: a notebook or a test shows its own output).
    The watcher is a thread of this process, reading the flushed rows once a second.

    The environment rules are the watch's (launch/env.prepare): PT_XLA_DEBUG is turned on
    only if torch_xla has not compiled yet in this process and the user did not set it;
    XLA's HLO dump stays off (it costs 30-45% CPU per compile).

    Example:
        with tpuscope.profile(store="runs", name="sweep") as run:
            train(steps=10)
        print(run.steps, run.findings)
    """
    own_settings = env.current() is None  # else a pytest session's (or an earlier block's) stay
    settings = env.prepare(shapes=False)
    run_dir = collect_here(
        store, name, warmup, settings, argv=list(sys.argv), command="tpuscope.profile()"
    )
    run = Run(run_dir)
    watcher = None
    if alerts:
        from tpuscope.launch.alerts import AlertWatcher

        watcher = AlertWatcher(run_dir).start()
    status, error = "finished", None
    try:
        yield run
    except BaseException as exc:
        status, error = "exception", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        stop_here(run_dir, status, error, settings)
        if watcher is not None:
            watcher.stop()
        ending = finish_run(run_dir, analysis=analyze_at_exit)
        run.reopen(ending.where)  # an object store: shipped now, read from there
        if own_settings:  # the variables were for this block: a program started later gets none
            env.reset()
        if ending.error is not None:  # the analysis failed: said as the error it is
            raise ending.error
