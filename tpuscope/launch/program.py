"""`tpuscope run`: launch the user's program unchanged with collection on, then finish the run.

The program runs as a child process with tpuscope's sitecustomize on its path, so
it (and every Python process it spawns) profiles itself into the run folder. This
process only prepares the environment, waits, records how the program ended and
finishes the run as every run is finished (launch/lifecycle.finish_run).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpuscope.analyze.chips import DEFAULT_TARGET
from tpuscope.collect.trace_steps import AUTO, ENV_TRACE_STEPS, parse_window
from tpuscope.launch.env import build_env
from tpuscope.launch.lifecycle import Ending, close_run, finish_run, open_run
from tpuscope.launch.signals import Child
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import Run, RunStore
from tpuscope.store.hosts import ENV_HOST, ENV_RUN_ID, file_host
from tpuscope.store.liveness import launcher_identity
from tpuscope.store.pods import join_remote, join_run
from tpuscope.version import __version__

if TYPE_CHECKING:
    from tpuscope.launch.alerts import AlertWatcher

_PYTHON = re.compile(r"^python[0-9.]*$")


class UsageError(Exception):
    """A bad command line or input: one line for the user, exit status 2."""


@dataclass
class Program:
    """The command to run and what it names (script file, module or inline code)."""

    argv: list[str]
    name: str
    script: Path | None = None
    module: str | None = None


def resolve_program(args: list[str]) -> Program:
    """Accept `python train.py ...`, `train.py ...`, `-m pkg.mod ...` and `python -c CODE`."""
    if not args:
        raise UsageError("no program given: try 'tpuscope run python train.py'")
    head = args[0]
    if _PYTHON.match(os.path.basename(head)):
        argv, rest = list(args), args[1:]
    elif head.endswith(".py") or head in ("-m", "-c"):
        argv, rest = [sys.executable, *args], list(args)
    else:
        return Program(argv=list(args), name=Path(head).stem)
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest = rest[1:]  # interpreter flags such as -u or -X dev
    if not rest:
        raise UsageError("no script given to python")
    if rest[0] == "-c":
        return Program(argv=argv, name="python-c")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UsageError("-m needs a module name")
        module = rest[1]
        if _module_missing(module):
            raise UsageError(f"module not found: {module}")
        return Program(argv=argv, name=module.rsplit(".", 1)[-1], module=module)
    script = Path(rest[0])
    if not script.is_file():
        raise UsageError(f"script not found: {script}")
    return Program(argv=argv, name=script.stem, script=script)


def _module_missing(module: str) -> bool:
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True
    finally:
        sys.path.pop(0)


def describe_exit(code: int) -> str:
    """The run's status from the program's return code."""
    if code == 0:
        return "finished"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return "failed"


class StartError(UsageError):
    """The program could not be started; `code` is what a shell would exit with (127, 126)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_program(
    program: Program,
    store: RunStore,
    name: str | None = None,
    warmup: int = DEFAULT_WARMUP,
    deep: bool = False,
    trace_steps: str | None = None,
    target: str | None = None,
    alerts: bool = False,
    run_id: str | None = None,
    analysis: bool | None = None,
    show: Callable[[Ending], None] | None = None,
) -> tuple[Ending | None, int]:
    """Run the program under collection and finish its run (launch/lifecycle.finish_run, with
    `analysis` and `show`); returns (how the run ended, None when it could not be written;
    the program's return code: negative when a signal killed it, as subprocess says).
    With `alerts`, new problems are said on stderr while it runs (tpuscope/launch/alerts/).
    With run_id (`--run-id`, TPUSCOPE_RUN_ID) every host that runs it joins one run folder and
    keeps its own launcher meta in hosts/<host>.json (store/hosts.py)."""
    device_options = _device_options(trace_steps, target)
    host = file_host()
    if run_id:
        run_dir = _join(store, run_id, host, name or program.name)
        Run(run_dir).update_host_meta(
            host, cwd=os.getcwd(), warmup=warmup, start_ns=time.time_ns(), status="running"
        )  # what open_run puts in a one-host run's meta.json
    else:
        run_dir = open_run(store, name or program.name, warmup)
    child = build_env(run_dir, warmup, deep, host=host if run_id else None)
    if run_id:
        child.set_default(ENV_HOST, host)  # every process of this host writes as this host
        child.set_default(ENV_RUN_ID, run_id)
    if trace_steps:
        child.env[ENV_TRACE_STEPS] = child.set_by_tpuscope[ENV_TRACE_STEPS] = trace_steps
    else:  # on a TPU, a short trace after the warm-up measures the device (trace_steps.py)
        child.set_default(ENV_TRACE_STEPS, AUTO)
    record = MetaRecorder(run_dir, host if run_id else None)
    record(
        host=host,
        argv=program.argv,
        command=shlex.join(program.argv),
        deep=deep,
        env_set=child.set_by_tpuscope,
        env_left_to_user=child.left_to_user,
        launcher=launcher_identity(),
        tpuscope_version=__version__,
        alerts=alerts,
        **device_options,
    )
    for note in child.notes:
        print(f"tpuscope: {note}", file=sys.stderr)
    try:
        running = Child(program.argv, child.env)
    except OSError as exc:
        code = 126 if isinstance(exc, PermissionError) else 127  # what a shell exits with
        record.close("failed to start", error=str(exc), exit_code=code)
        raise StartError(f"cannot start {program.argv[0]}: {exc.strerror or exc}", code) from exc
    watcher = _start_alerts(run_dir) if alerts else None
    code = running.wait()
    record.close(describe_exit(code), exit_code=code)
    if running.hurried and (code != 0 or analysis is not True):
        # asked to end: end as the bare program would, now (rows and meta are kept, `show`
        # analyses the run; the alert watcher's daemon thread ends with the launcher). Limits
        # (analysis True) still judge a program that exited 0: they may change its status.
        return finish_run(
            run_dir, analysis=False, compact=False, pod_host=host if run_id else None, store=store
        ), code
    if watcher is not None:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C now skips the last count, not the run
            watcher.stop()  # the rows of the program's last seconds, then a last count
        record(alerts_cost=watcher.cost)
    if record.failed:  # the store is full or gone: said once already, nothing more to read
        return None, code
    return finish_run(
        run_dir, analysis=analysis, pod_host=host if run_id else None, store=store, show=show
    ), code


def _join(store: RunStore, run_id: str, host: str, name: str) -> Path:
    """This host's folder of the pod run `run_id`: the shared folder itself, or for an object
    store this host's own stage, shipped there (store/hosts.py)."""
    if store.local:
        return join_run(store.loc.as_path(), run_id, name=name)
    return join_remote(store.loc, run_id, host, name=name)


def _start_alerts(run_dir: Path) -> AlertWatcher | None:
    """The live-alert watcher, on a thread of this launcher (never the program's process): started
    once the child runs, so it inherits the signals blocked for Child.wait."""
    from tpuscope.launch.alerts import AlertWatcher

    try:
        return AlertWatcher(run_dir).start()
    except Exception as exc:  # alerts are a convenience: the run goes on without them
        print(f"tpuscope: no live alerts: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


class MetaRecorder:
    """The launcher's writes of meta.json: a full or vanished store is said once, in one line,
    and never stops the program or changes its exit status."""

    def __init__(self, run_dir: Path, host: str | None = None) -> None:
        self.run_dir = run_dir
        self.run = Run(run_dir)
        self.host = host  # a run of many hosts: this launcher writes only hosts/<host>.json
        self.failed = False

    def __call__(self, **fields: object) -> None:
        if self.host:
            self._guarded(self.run.update_host_meta, self.host, **fields)
        else:
            self._guarded(self.run.update_meta, **fields)

    def close(self, status: str, **fields: object) -> None:
        if self.host:  # the end of this host, in its own file (close_run writes meta.json)
            self._guarded(
                self.run.update_host_meta, self.host, status=status, end_ns=time.time_ns(), **fields
            )
        else:
            self._guarded(close_run, self.run_dir, status, **fields)

    def _guarded(self, write: Callable[..., object], *args: object, **fields: object) -> None:
        try:
            write(*args, **fields)
        except OSError as exc:
            if not self.failed:
                print(
                    f"tpuscope: cannot record the run in {self.run_dir}: {exc.strerror or exc} "
                    "(the program is not affected)",
                    file=sys.stderr,
                )
            self.failed = True


def _device_options(trace_steps: str | None, target: str | None) -> dict[str, object]:
    """Meta for --trace-steps and --target; UsageError when either is malformed."""
    from tpuscope.analyze.chips import chip

    try:
        window = parse_window(trace_steps)
        chip(target)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options: dict[str, object] = {"target": (target or DEFAULT_TARGET).lower()}
    if window is not None and not window.auto:
        options["trace_steps"] = [window.start, window.stop]
    return options
