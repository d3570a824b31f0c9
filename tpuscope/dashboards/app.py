"""The Dash app: a shell (header, URL router) over page modules that read one run store.

Routes (client-side, dcc.Location):
    /                          Runs
    /run/<id>                  Run overview
    /run/<id>/<tab>            recompiles | fallbacks | churn | tensorcore | trace | hosts
    /compare/<id_a>/<id_b>     Compare
    /download/<id>/<file>      a trace file listed in the run folder (server route)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, dcc, html

from .components import error_page
from .data import RunNotFound, StoreData
from .pages import (
    churn,
    compare,
    fallbacks,
    hosts,
    overview,
    recompiles,
    runs,
    tensorcore,
    trace,
    zoo,
)

ALLOWED_HOSTS = "TPUSCOPE_ALLOWED_HOSTS"  # Flask config key: Host values answered, None = any

log = logging.getLogger("tpuscope.dashboard")
ASSETS = Path(__file__).resolve().parent / "assets"
RUN_PAGES: dict[str, Callable[[StoreData, str], Any]] = {
    "": overview.layout,
    "recompiles": recompiles.layout,
    "fallbacks": fallbacks.layout,
    "churn": churn.layout,
    "tensorcore": tensorcore.layout,
    "trace": trace.layout,
    "hosts": hosts.layout,
}


def route(data: StoreData, pathname: str | None) -> Any:
    """The page for a URL path. Path parts are used only as validated run ids, never as paths."""
    parts = [p for p in (pathname or "/").split("/") if p]
    try:
        if not parts:
            return runs.layout(data)
        if (
            parts[0] == "run"
            and len(parts) in (2, 3)
            and (parts[2] if len(parts) == 3 else "") in RUN_PAGES
        ):
            data.run_dir(parts[1])
            return RUN_PAGES[parts[2] if len(parts) == 3 else ""](data, parts[1])
        if parts == ["zoo"]:
            return zoo.layout(data)
        if parts[0] == "compare" and len(parts) == 3:
            data.run_dir(parts[1])
            data.run_dir(parts[2])
            return compare.layout(data, parts[1], parts[2])
    except RunNotFound as exc:
        return error_page(str(exc))
    except Exception as exc:  # a damaged run: say so on the page, keep the details in the log
        log.exception("cannot render %s", pathname)
        return error_page(f"cannot show {pathname}: {type(exc).__name__}: {exc}")
    return error_page(f"no page at {pathname}")


def _shell() -> html.Div:
    return html.Div(
        [
            dcc.Location(id="url", refresh=False),
            html.Header(
                className="topbar",
                children=[
                    dcc.Link("tpuscope", href="/", className="brand"),
                    dcc.Link("Runs", href="/", className="nav"),
                    dcc.Link("Zoo", href="/zoo", className="nav"),
                ],
            ),
            # only a new page shows the spinner: a live run's pages re-read it every 2 s in place
            dcc.Loading(
                html.Main(id="page"),
                type="dot",
                delay_show=400,
                target_components={"page": "children"},
            ),
        ]
    )


def _add_download_route(app: Dash, data: StoreData) -> None:
    from flask import abort, send_file

    @app.server.route("/download/<run_id>/<path:name>")
    def _download(run_id: str, name: str) -> Any:
        """Send a trace file only if it is in the run folder's listing (no path joins on input)."""
        try:
            files = data.files(run_id, trace.TRACE_FILES)
        except RunNotFound:
            abort(404)
        match = files.get(name)
        if match is None:
            abort(404)
        return send_file(match, as_attachment=True, download_name=match.name)


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})  # names alone: at any port


def host_allowed(host_header: str, allowed: Any) -> bool:
    """Whether a request's Host is one the dashboard answers to: `name:port` entries match
    exactly, bare names at any port. A DNS-rebinding page sends its own name and fails."""
    if allowed is None:
        return True
    host = host_header.lower()
    name = host if host.endswith("]") else host.rsplit(":", 1)[0]
    return host in allowed or name in allowed


def _add_host_check(app: Dash) -> None:
    """Refuse (403, one log line) requests for another Host; `tpuscope dashboard` narrows the
    default (loopback names) to its own address and port, or lifts it for --host 0.0.0.0."""
    from flask import request

    app.server.config.setdefault(ALLOWED_HOSTS, LOOPBACK_HOSTS)

    @app.server.before_request
    def _check_host() -> Any:
        allowed = app.server.config[ALLOWED_HOSTS]
        if host_allowed(request.host, allowed):
            return None
        log.warning(
            "refused a request for Host %r (this dashboard answers to %s)",
            request.host[:100],
            ", ".join(sorted(allowed)),
        )
        return "tpuscope: this dashboard answers only to its own address\n", 403


def unknown_runs(data: StoreData, path: str) -> list[str]:
    """The run ids a page URL names that the store does not hold (/run/<id>[/tab],
    /compare/<a>/<b>); [] for any other path."""
    parts = [p for p in path.split("/") if p]
    ids = parts[1:2] if parts[:1] == ["run"] else parts[1:3] if parts[:1] == ["compare"] else []
    missing = []
    for run_id in ids:
        try:
            data.run_dir(run_id)
        except RunNotFound:
            missing.append(run_id)
    return missing


def _add_error_routes(app: Dash, data: StoreData) -> None:
    """A bad or unknown run id sent to a callback or route is a 404 with one log line,
    not a 500 with a traceback; a page URL naming an unknown run answers 404 too (its page,
    rendered in the browser, says which run is missing)."""
    from flask import request

    @app.server.after_request
    def _page_status(response: Any) -> Any:
        if (
            response.status_code == 200
            and response.mimetype == "text/html"
            and unknown_runs(data, request.path)
        ):
            response.status_code = 404
        return response

    @app.server.errorhandler(RunNotFound)
    def _not_found(exc: RunNotFound) -> Any:
        log.warning("404 %s: %s", request.path, exc)
        return {"error": str(exc)}, 404


def _warm_plotly() -> None:
    """Build one figure of each kind so the first request does not pay Plotly's lazy imports (~0.5 s)."""
    import plotly.graph_objects as go

    from .figures.common import base_figure

    fig = base_figure("warm-up")
    for kind in (go.Scatter(x=[0]), go.Bar(x=[0]), go.Heatmap(z=[[0]])):
        fig.add_trace(kind)
    fig.to_plotly_json()


def create_app(store: str | os.PathLike[str] | None = None, data: StoreData | None = None) -> Dash:
    """A Dash app over the run store at `store` (default ./tpuscope-runs or $TPUSCOPE_STORE).

    Serves every asset itself (no CDN, no web fonts), so it works offline.
    """
    data = data or StoreData(store)
    app = Dash(
        __name__,
        title="tpuscope",
        update_title=None,
        assets_folder=str(ASSETS),
        serve_locally=True,
        suppress_callback_exceptions=True,
        compress=False,
    )
    app.layout = _shell()
    _warm_plotly()

    @app.callback(Output("page", "children"), Input("url", "pathname"))
    def _route(pathname: str | None) -> Any:
        return route(data, pathname)

    runs.register(app)
    overview.register(app, data)
    recompiles.register(app, data)
    trace.register(app, data)
    _add_download_route(app, data)
    _add_error_routes(app, data)
    _add_host_check(app)
    app.tpuscope_data = data  # for tests and the benchmark
    return app
