"""Start collecting in this process: from `tpuscope run`'s environment or from profile().

Backends are hooked when (and only if) the program imports them, through wrapt's
post-import hooks, so a profiled program that never imports torch_xla pays nothing
for it and tpuscope never imports a framework on the program's behalf.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import wrapt

from tpuscope.collect.session import Session

ENV_RUN_DIR = "TPUSCOPE_RUN_DIR"
ENV_WARMUP = "TPUSCOPE_WARMUP"
ENV_OWNS_DEBUG = "TPUSCOPE_OWNS_PT_XLA_DEBUG"  # "1" when tpuscope, not the user, enabled PT_XLA_DEBUG

_active: dict[str, Any] = {}


def active_session() -> Session | None:
    return _active.get("session")


def debug_file_for(run_dir: Path) -> Path:
    return run_dir / "debug" / f"pt_xla_debug-{socket.gethostname()}-{os.getpid()}.txt"


def start(run_dir: str | Path, warmup: int = 2, own_debug: bool = False,
          install_handlers: bool = True) -> Session:
    """Open this process's session in run_dir and hook backends as they are imported."""
    run_dir = Path(run_dir)
    if own_debug:
        debug_file = debug_file_for(run_dir)
        debug_file.parent.mkdir(parents=True, exist_ok=True)
        os.environ["PT_XLA_DEBUG_FILE"] = str(debug_file)
    session = Session(run_dir, warmup=warmup).start(install_handlers=install_handlers)
    _active["session"] = session
    _active["collectors"] = []
    wrapt.register_post_import_hook(_on_torch_xla, "torch_xla")
    return session


def _on_torch_xla(module: Any) -> None:
    session = active_session()
    if session is None or session._closed:
        return
    from tpuscope.collect.xla import XlaCollector

    debug_file = os.environ.get("PT_XLA_DEBUG_FILE") if os.environ.get("PT_XLA_DEBUG_LEVEL") else None
    _active["collectors"].append(XlaCollector(session, debug_file).install())


def stop(status: str | None = None, error: str | None = None) -> None:
    """Unhook every backend and close the session (profile() uses this; the CLI uses atexit)."""
    for collector in _active.get("collectors", []):
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
    warmup = int(os.environ.get(ENV_WARMUP) or 2)
    return start(run_dir, warmup=warmup, own_debug=os.environ.get(ENV_OWNS_DEBUG) == "1")
