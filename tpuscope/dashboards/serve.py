"""`tpuscope dashboard`: serve the app on a local port and say where.

Kept out of cli.py so `tpuscope --help` never imports Dash; errors are
returned as one-line messages for the CLI to print (exit 2).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import sys
from typing import Any

LOOPBACK_NAMES = {"localhost"}


class ServeError(Exception):
    """Cannot serve (no dashboard dependencies, no store, port taken); the message names the thing."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/"


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """Host header values the dashboard answers to: its own address and loopback names at its
    port. A page on another site that rebinds its DNS name to 127.0.0.1 sends its own name
    as Host, so it is refused and cannot read the runs. None (any Host) when --host opened
    the dashboard to the network on purpose (0.0.0.0, a LAN address)."""
    if not is_loopback(host):
        return None
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {shown, "localhost", "127.0.0.1", "[::1]"}
    return {f"{name.lower()}:{port}" for name in names} | (
        {n.lower() for n in names} if port == 80 else set()
    )


def _check_store(store: str | os.PathLike[str]) -> None:
    """A store that is there and a folder (a local path or an fsspec URL); ServeError otherwise."""
    from .data import StoreMissing, check_store

    try:
        check_store(store)
    except StoreMissing as exc:
        raise ServeError(str(exc)) from None


def make_server(store: str | os.PathLike[str], host: str, port: int) -> Any:
    """A threaded WSGI server for the dashboard over `store`, already bound (port 0 = any free port)."""
    _check_store(store)
    try:
        from werkzeug.serving import make_server as werkzeug_server

        from .app import ALLOWED_HOSTS, create_app
    except ImportError as exc:
        raise ServeError(
            f"the dashboard needs {exc.name}: pip install 'tpuscope[dashboard]'"
        ) from exc
    app = create_app(store)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    said = (
        io.StringIO()
    )  # werkzeug prints bind errors and calls sys.exit(1): make it one line, exit 2
    try:
        with contextlib.redirect_stderr(said):
            server = werkzeug_server(host, port, app.server, threaded=True)
            app.server.config[ALLOWED_HOSTS] = allowed_hosts(host, server.server_port)
            return server
    except (OSError, SystemExit) as exc:
        reason = (said.getvalue().strip().splitlines() or [str(exc)])[0]
        raise ServeError(f"cannot listen on {host}:{port}: {reason} (try another --port)") from None


def serve(store: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve until Ctrl+C, printing the URL first (stdout) and any warning (stderr)."""
    server = make_server(store, host, port)
    if not is_loopback(host):
        print(
            f"tpuscope: warning: serving on {host}: anyone who can reach this machine can read these runs",
            file=sys.stderr,
        )
    print(
        f"tpuscope dashboard: {url_of(host, server.server_port)}  (store {store}; Ctrl+C to stop)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
