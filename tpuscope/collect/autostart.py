"""Start collecting in this process: from `tpuscope run`'s environment or from profile().

Backends are hooked when (and only if) the program imports them, through wrapt's
post-import hooks, so a profiled program that never imports torch_xla pays nothing
for it and tpuscope never imports a framework on the program's behalf.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import wrapt

from tpuscope.collect.envvars import ENV_OWNS_DEBUG, ENV_RUN_DIR, ENV_WARMUP  # noqa: F401  (re-exported)
from tpuscope.collect.session import Session
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import layout
from tpuscope.store.hosts import file_host

_active: dict[str, Any] = {}


def active_session() -> Session | None:
    return _active.get("session")


def debug_file_for(run_dir: Path) -> Path:
    return run_dir / layout.debug_file(file_host(), os.getpid())


def start(
    run_dir: str | Path,
    warmup: int = DEFAULT_WARMUP,
    own_debug: bool = False,
    install_handlers: bool = True,
    debug_file: str | Path | None = None,
) -> Session:
    """Open this process's session in run_dir and hook backends as they are imported.

    debug_file names the PT_XLA_DEBUG text torch_xla already writes in this process
    (it reads the setting once, at its first compile), for sessions that start later.
    """
    run_dir = Path(run_dir)
    if own_debug:
        own_file = debug_file_for(run_dir)
        own_file.parent.mkdir(parents=True, exist_ok=True)
        os.environ["PT_XLA_DEBUG_FILE"] = str(own_file)
    session = Session(run_dir, warmup=warmup).start(install_handlers=install_handlers)
    _active["session"] = session
    _active["collectors"] = []
    _active["debug_file"] = debug_file
    for module_name in BACKENDS:
        _when_imported(module_name, _install_collector)
    _when_imported("torch.multiprocessing.spawn", _on_mp_spawn)
    return session


def _when_imported(name: str, hook: Any) -> None:
    """Run hook on the module now if imported, else at import; registered once per process
    (wrapt keeps every registration, so a second start() would otherwise hook twice)."""
    hooked = _active.setdefault("hooked", set())
    if name not in hooked:
        hooked.add(name)
        wrapt.register_post_import_hook(hook, name)
    elif sys.modules.get(name) is not None:
        hook(sys.modules[name])


class Collector(Protocol):
    """What every backend collector offers the session's owner: hooks in, hooks out, and the
    work since the last step boundary recorded as a last step ("end") when a block closes."""

    def uninstall(self) -> None: ...

    def close_open_step(self) -> None: ...


def _xla_collector(session: Session) -> Collector:
    from tpuscope.collect.xla.collector import XlaCollector

    debug_file = _active.get("debug_file") or (
        os.environ.get("PT_XLA_DEBUG_FILE") if os.environ.get("PT_XLA_DEBUG_LEVEL") else None
    )
    return XlaCollector(session, debug_file).install()


def _jax_collector(session: Session) -> Collector:
    from tpuscope.collect.jax.collector import JaxCollector

    return JaxCollector(session).install()


def _torch_tpu_collector(session: Session) -> Collector:
    from tpuscope.collect.torch_tpu import collector

    return collector.install(session)


# module that, once imported, gets its collector -> (name said when it fails, collector factory)
BACKENDS: dict[str, tuple[str, Callable[[Session], Collector]]] = {
    "torch_xla": ("torch_xla", _xla_collector),
    "jax": ("JAX", _jax_collector),
    "torch_tpu": ("TorchTPU", _torch_tpu_collector),
}


def _install_collector(module: Any) -> None:
    """The one install path: a collector that fails to install says so in one line and the
    program goes on without it (never break the user's program)."""
    session = active_session()
    if session is None or session._closed:
        return
    label, factory = BACKENDS[module.__name__]
    session.expect_rows()  # a backend will write rows: start importing the writer (pyarrow) now
    try:
        _active["collectors"].append(factory(session))
    except Exception as exc:
        print(
            f"tpuscope: {label} collection disabled: {type(exc).__name__}: {exc}", file=sys.stderr
        )


def _on_mp_spawn(module: Any) -> None:
    """torch.multiprocessing.spawn gives each worker its index as an argument only (no env
    var): wrap the worker entry `_wrap(fn, i, ...)` so the session learns it. The wrapper
    keeps the original's name and module, so the parent still pickles it by reference."""
    original = getattr(module, "_wrap", None)
    if original is None or getattr(original, "_tpuscope", False):
        return

    @functools.wraps(original)
    def _wrap(fn: Any, i: int, *args: Any, **kwargs: Any) -> Any:
        session = active_session()
        if session is not None and isinstance(i, int):
            session.set_rank(spawn_index=i)
        return original(fn, i, *args, **kwargs)

    _wrap._tpuscope = True  # type: ignore[attr-defined]
    module._wrap = _wrap


def stop(
    status: str | None = None, error: str | None = None, close_open_step: bool = False
) -> None:
    """Unhook every backend and close the session (profile() uses this; the CLI uses atexit).

    close_open_step records work done since the last step boundary (a block that ends
    with `.item()` rather than a sync) as a last step, boundary "end".
    """
    for collector in _active.get("collectors", []):
        if close_open_step:
            collector.close_open_step()
        collector.uninstall()
    session = _active.pop("session", None)
    _active["collectors"] = []
    if session is not None:
        session.close(status=status, error=error)


def start_from_env() -> Session | None:
    """Called from the sitecustomize that `tpuscope run` puts on the child's path."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return None
    warmup = int(os.environ.get(ENV_WARMUP) or DEFAULT_WARMUP)
    return start(run_dir, warmup=warmup, own_debug=os.environ.get(ENV_OWNS_DEBUG) == "1")
