"""Read paths at scale: the analysis at exit, `show`, `show --json`, `ls` and dashboard pages.

Synthetic runs written straight into the store layout with pyarrow (tests/synthetic.py:
steps, compiles, fallbacks in every step, six metrics rows per step, a trace, split into part
files as a live run flushes them), at 1k, 10k, 100k and 1M steps, and stores of 10, 100 and
1000 small runs. Times:
  analysis       tpuscope.detect.run_analysis.analyze on the run (what `tpuscope run` does at exit)
  show, --json   `tpuscope show RUN` as a subprocess (CLI start-up included) and in process
  ls             `tpuscope ls` as a subprocess and RunStore.list_runs in process
  pages          every page of a run (Overview ... Hosts), the Compare page of the run against a
                 second run of as many steps (`--pages Compare`), and the Runs page: the Dash app's own
                 callback request (POST /_dash-update-component through Flask's test client:
                 routing, reading, figures, JSON), cold (a fresh app, nothing cached) and warm
                 (the median of later requests)
  browser        with --browser: a real headless Chromium (Debian's, through Selenium) from
                 navigation until the page and all its graphs are drawn and Dash is idle: first
                 load, server cold, server warm, and the renderer main thread's CPU time
Wall times on a shared machine wait for a core; CPU times are given beside them.

    python benchmarks/read_scale.py                       # 1k..1M steps, 10/100/1000 runs
    python benchmarks/read_scale.py --steps 1000 100000 --runs 10 200 --browser --json
    python benchmarks/read_scale.py --steps 1000000 --runs 200 --pages Overview --browser
    python benchmarks/read_scale.py --steps 100000 --events 1000000 --runs --pages Trace Compare --browser
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests/synthetic.py

from tests.synthetic import make_run  # noqa: E402
from tpuscope.store import Run, RunStore, update_meta  # noqa: E402

TARGETS = {
    "show": 1.0,
    "show --json": 1.0,
    "Overview": 1.0,
    "Runs": 0.3,
    "Trace": 1.0,
    "Compare": 1.0,
}
# Every page of a run: URL suffix and the id of the page's element.
RUN_PAGES = {
    "Overview": ("", "page-overview"),
    "Recompiles": ("/recompiles", "page-recompiles"),
    "Fallbacks": ("/fallbacks", "page-fallbacks"),
    "Churn": ("/churn", "page-churn"),
    "TensorCore": ("/tensorcore", "page-tensorcore"),
    "Trace": ("/trace", "page-trace"),
    "Hosts": ("/hosts", "page-hosts"),
}
COMPARE = "Compare"  # /compare/<run>/<second run>: timed when --pages names it (or by default)
EVENTS: dict[str, int | None] = {"trace_events": None}  # --events: trace events of each run


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall s, CPU s, result) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - start, time.process_time() - cpu, result


def cli(*args: str) -> tuple[float, float]:
    """(wall s, CPU s) of one `tpuscope ...` subprocess (its output is discarded, its status
    checked); the CPU time is the child's user + system time, what a loaded machine does not
    inflate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tpuscope", *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"tpuscope {' '.join(args)} failed: {proc.stderr[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def route_request(client: Any, path: str) -> Any:
    """One router callback request as the browser sends it (the response)."""
    body = {
        "output": "page.children",
        "outputs": {"id": "page", "property": "children"},
        "inputs": [{"id": "url", "property": "pathname", "value": path}],
        "changedPropIds": ["url.pathname"],
        "state": [],
    }
    response = client.post("/_dash-update-component", json=body)
    if response.status_code != 200:
        raise SystemExit(f"{path}: HTTP {response.status_code}")
    return response


def page_request(client: Any, path: str) -> int:
    """One router callback request; returns the response's size."""
    return len(route_request(client, path).data)


def page_times(store: Path, path: str, repeat: int = 3) -> dict[str, float]:
    """Cold (fresh app) and warm server time of one page (wall and CPU), and its payload."""
    from tpuscope.dashboards.app import create_app

    client = create_app(store).server.test_client()
    cold, cold_cpu, size = timed(lambda: page_request(client, path))
    warm = [timed(lambda: page_request(client, path)) for _ in range(repeat)]
    return {
        "cold_s": cold,
        "cold_cpu_s": cold_cpu,
        "warm_s": statistics.median(w[0] for w in warm),
        "warm_cpu_s": statistics.median(w[1] for w in warm),
        "payload_kb": size / 1024,
    }


def analysis_times(run_dir: Path) -> dict[str, float]:
    from tpuscope.detect.run_analysis import analyze

    wall, cpu, report = timed(lambda: analyze(Run(run_dir)))
    findings = sum(p.stat().st_size for p in (run_dir / "findings").glob("*.parquet"))
    return {
        "analysis_s": wall,
        "analysis_cpu_s": cpu,
        "findings": len(report.findings),
        "findings_kb": findings / 1024,
    }


def show_times(store: Path, run_dir: Path) -> dict[str, float]:
    """`show` and `show --json` as subprocesses, and what they do after their imports."""
    from tpuscope.detect.run_analysis import analyze
    from tpuscope.report.json_report import to_json

    out: dict[str, float] = {}
    for key, extra in (("show", ()), ("show_json", ("--json",))):
        out[f"{key}_s"], out[f"{key}_cpu_s"] = cli(
            "show", run_dir.name, *extra, "--store", str(store)
        )
    wall, cpu, text = timed(lambda: to_json(analyze(Run(run_dir), redetect=False)))
    out.update(show_json_inproc_s=wall, show_json_inproc_cpu_s=cpu, show_json_kb=len(text) / 1024)
    return out


def one_run(root: Path, steps: int, browser: Any, compare: bool = True) -> dict[str, Any]:
    """A run of `steps` steps in its own store: analysis, show, pages (and browser times)."""
    store = root / f"steps-{steps}"
    parts = 1 + steps // 20_000  # a 1M-step run in 51 parts per table
    events = EVENTS["trace_events"]
    build, _, run_dir = timed(
        lambda: make_run(
            store,
            "scale",
            steps=steps,
            trace_events=min(steps, 200_000) if events is None else events,
            recompiles=min(300, steps // 10),
            metrics=True,
            parts=parts,
            analyze=None,
        )
    )
    row: dict[str, Any] = {"steps": steps, "parts_per_table": parts, "build_s": build}
    row.update(analysis_times(run_dir))
    row.update(show_times(store, run_dir))
    pages = {
        name: (f"/run/{run_dir.name}{suffix}", ident) for name, (suffix, ident) in RUN_PAGES.items()
    }
    if compare:  # a second analysed run of as many steps (another seed, no device tables)
        other = make_run(
            store,
            "scale-b",
            steps=steps,
            device=False,
            recompiles=min(200, steps // 10),
            seed=1,
            metrics=True,
            parts=parts,
            analyze=True,
        )
        pages[COMPARE] = (f"/compare/{run_dir.name}/{other.name}", "page-compare")
    for name, (path, _) in pages.items():
        row[name] = page_times(store, path)
    if browser is not None:
        row["browser"] = browser_times(browser, store, pages)
    return row


def many_runs(root: Path, count: int, browser: Any) -> dict[str, Any]:
    """A store of `count` small analysed runs (copies of one): `ls` and the Runs page."""
    store = root / f"runs-{count}"
    template = (
        make_run(
            root / "template",
            "small",
            steps=1000,
            trace_events=0,
            recompiles=10,
            metrics=True,
            device=False,
            analyze=True,
        )
        if not (root / "template").exists()
        else next((root / "template").iterdir())
    )
    for i in range(count):
        target = store / f"small-{i:05d}"
        shutil.copytree(template, target)
        update_meta(target, run_id=target.name, start_ns=time.time_ns() - i * 1_000_000_000)
        os.utime(target / "analysis.json")  # as written at the run's end: newer than its parts
    wall, cpu, runs = timed(lambda: RunStore(store).list_runs())
    ls_wall, ls_cpu = cli("ls", "--store", str(store))
    row: dict[str, Any] = {
        "runs": count,
        "ls_s": ls_wall,
        "ls_cpu_s": ls_cpu,
        "ls_inproc_s": wall,
        "ls_inproc_cpu_s": cpu,
        "Runs": page_times(store, "/"),
    }
    assert len(runs) == count
    if browser is not None:
        row["browser"] = browser_times(browser, store, {"Runs": ("/", "page-runs")})
    return row


def browser_times(
    browser: Any, store: Path, pages: dict[str, tuple[str, str]], repeat: int = 3
) -> dict[str, dict[str, float]]:
    """Seconds from navigation until each page and all its graphs are drawn and Dash is idle,
    on a fresh server per store: `first_s` the first load (server and browser cold: Plotly's
    bundle fetched and compiled), `cold_s` a load with the server's caches emptied once the
    browser's are warm (a run opened for the first time in a dashboard already in use; two
    untimed rounds first, as V8 compiles a script from its code cache only from its third
    run on), `best_s` the fastest of `repeat` loads with
    the server warm (what is left is the browser's own work); `cpu_s` is the median CPU time of
    the page's renderer main thread over those loads (Chrome's Performance.getMetrics
    ThreadTime: the browser's work, which a loaded machine does not inflate); `in_app_cold_s`
    and `in_app_cpu_s` the median of `repeat` cold loads of the page opened from the Runs page
    as its links open it (no reload: the scripts stay loaded), the server's caches emptied."""
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from werkzeug.serving import make_server

    from tpuscope.dashboards.app import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    app = create_app(store)
    graphs = {name: _graphs(app, path) for name, (path, _) in pages.items()}
    app.tpuscope_data.clear()
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    browser.execute_cdp_cmd("Performance.enable", {})
    out = {}
    try:
        browser.get(base + "/no-such-page")  # load the JS bundles once
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CLASS_NAME, "topbar"))
        first = {
            name: _load(browser, base + path, ident, graphs[name])
            for name, (path, ident) in pages.items()
        }
        for _ in range(
            2
        ):  # Chrome reuses V8's compiled code of a script (Plotly: 4.8 MB) from its third run on
            for name, (path, ident) in pages.items():
                _load(browser, base + path, ident, graphs[name])
        app.tpuscope_data.clear()
        for name, (path, ident) in pages.items():
            cold = _load(browser, base + path, ident, graphs[name])
            warm = [_load(browser, base + path, ident, graphs[name]) for _ in range(repeat)]
            clicked = []
            for _ in range(repeat):
                _load(browser, base + "/", "page-runs", 0)  # the dashboard, open
                app.tpuscope_data.clear()
                clicked.append(_navigate(browser, path, ident, graphs[name]))
            out[name] = {
                "first_s": first[name][0],
                "cold_s": cold[0],
                "best_s": min(w[0] for w in warm),
                "cpu_s": statistics.median(w[1] for w in warm),
                "in_app_cold_s": statistics.median(c[0] for c in clicked),
                "in_app_cpu_s": statistics.median(c[1] for c in clicked),
                "graphs": graphs[name],
            }
    finally:
        server.shutdown()
        thread.join(10)
    return out


def _graphs(app: Any, path: str) -> int:
    """How many graphs the page at `path` has (counted in the layout the server sends)."""
    layout = route_request(app.server.test_client(), path).get_json()

    def count(node: Any) -> int:
        if isinstance(node, dict):
            own = node.get("type") == "Graph" and node.get("namespace") == "dash_core_components"
            return own + sum(count(v) for v in node.values())
        return sum(count(v) for v in node) if isinstance(node, list) else 0

    return count(layout)


def _load(browser: Any, url: str, ident: str, graphs: int) -> tuple[float, float]:
    """(seconds until the page's element is there, its `graphs` Plotly graphs are drawn and no
    Dash callback is loading; the renderer main thread's CPU seconds meanwhile)."""
    browser.get("about:blank")
    before = _thread_time(browser)
    start = time.perf_counter()
    browser.get(url)
    _wait_drawn(browser, ident, graphs)
    elapsed = time.perf_counter() - start
    return elapsed, _thread_time(browser) - before


def _navigate(browser: Any, path: str, ident: str, graphs: int) -> tuple[float, float]:
    """As `_load`, for a page opened inside the dashboard already open: dcc.Link's own
    navigation (history.pushState and Dash's `_dashprivate_pushstate` event), so the scripts
    (Plotly's bundle) stay loaded and only the route's callback and the page are new. Timed
    from when the renderer is idle (the page it leaves finished drawing)."""
    browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "requestIdleCallback(() => done(), {timeout: 2000});"
    )
    before = _thread_time(browser)
    start = time.perf_counter()
    browser.execute_script(
        "window.history.pushState({}, '', arguments[0]);"
        "window.dispatchEvent(new CustomEvent('_dashprivate_pushstate'));",
        path,
    )
    _wait_drawn(browser, ident, graphs)
    return time.perf_counter() - start, _thread_time(browser) - before


def _wait_drawn(browser: Any, ident: str, graphs: int) -> None:
    """Until the page's element is there, its `graphs` Plotly graphs are drawn and no Dash
    callback is loading."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120, poll_frequency=0.02)
    wait.until(lambda d: d.find_elements(By.ID, ident))
    wait.until(
        lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".filter(p => p.querySelector('.main-svg')).length >= arguments[0]"
            " && !document.querySelector('[data-dash-is-loading=\"true\"]');",
            graphs,
        )
    )


def _thread_time(browser: Any) -> float:
    metrics = browser.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return next((m["value"] for m in metrics if m["name"] == "ThreadTime"), float("nan"))


def open_browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1000",
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _browser(browser: dict[str, Any], page: str) -> str:
    if page not in browser:
        return ""
    b = browser[page]
    return f"{b['first_s']:6.2f} {b['cold_s']:6.2f} {b['best_s']:6.2f} {b['cpu_s']:6.2f}"


def print_table(results: dict[str, Any]) -> None:
    load = os.getloadavg()[0]
    print(
        f"load average {load:.1f} on {os.cpu_count()} cores (wall time includes waiting for a core)"
    )
    print(
        f"{'steps':>9} {'analysis s (cpu)':>17} {'findings KB':>11} {'show s (cpu)':>13} "
        f"{'--json s (cpu)':>14} {'--json KB':>9}"
    )
    for r in results["runs"]:
        print(
            f"{r['steps']:>9,} {r['analysis_s']:8.2f} ({r['analysis_cpu_s']:5.2f}) {r['findings_kb']:11.1f} "
            f"{r['show_s']:6.2f} ({r['show_cpu_s']:4.2f}) {r['show_json_s']:7.2f} ({r['show_json_cpu_s']:4.2f}) "
            f"{r['show_json_kb']:9.1f}"
        )
    print(
        f"\n{'steps':>9} {'page':11} {'server cold s (cpu)':>19} {'warm s':>6} {'KB':>5}   "
        "browser: first   cold   best  cpu s"
    )
    for r in results["runs"]:
        for page in [*RUN_PAGES, COMPARE]:
            if page not in r:
                continue
            t = r[page]
            print(
                f"{r['steps']:>9,} {page:11} {t['cold_s']:11.2f} ({t['cold_cpu_s']:4.2f}) {t['warm_s']:6.2f} "
                f"{t['payload_kb']:5.0f}   {_browser(r.get('browser', {}), page)}"
            )
    for r in results["runs"]:  # a page's cold load in the browser against its target
        for page, b in r.get("browser", {}).items():
            if page in TARGETS:
                met = "met" if b["cold_s"] < TARGETS[page] else "not met"
                print(
                    f"{r['steps']:>9,} {page}: browser cold {b['cold_s']:.2f} s, renderer CPU "
                    f"{b['cpu_s']:.2f} s, server cold CPU {r[page]['cold_cpu_s']:.2f} s "
                    f"(target {TARGETS[page]:.1f} s cold: {met}, at load {load:.1f})"
                )
                met = "met" if b["in_app_cold_s"] < TARGETS[page] else "not met"
                print(
                    f"{r['steps']:>9,} {page}: opened in the dashboard, cold "
                    f"{b['in_app_cold_s']:.2f} s, renderer CPU {b['in_app_cpu_s']:.2f} s "
                    f"(target {TARGETS[page]:.1f} s: {met})"
                )
    print(
        f"\n{'runs':>6} {'ls s (cpu)':>13} {'list_runs s':>11} {'Runs cold s (cpu)':>17} {'warm s':>6}   "
        "browser: first   cold   best  cpu s"
    )
    for r in results["stores"]:
        t = r["Runs"]
        print(
            f"{r['runs']:>6} {r['ls_s']:6.2f} ({r['ls_cpu_s']:4.2f}) {r['ls_inproc_s']:11.3f} {t['cold_s']:10.3f} ({t['cold_cpu_s']:4.2f}) "
            f"{t['warm_s']:6.3f}   {_browser(r.get('browser', {}), 'Runs')}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--runs", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument(
        "--browser", action="store_true", help="also time pages in headless Chromium"
    )
    parser.add_argument(
        "--pages", nargs="*", choices=[*RUN_PAGES, COMPARE], help="time only these run pages"
    )
    parser.add_argument(
        "--events",
        type=int,
        help="trace events of each run (default: as many as steps, at most 200,000)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", type=Path, help="build the stores here and keep them")
    args = parser.parse_args(argv)
    for name in set(RUN_PAGES) - set(args.pages or RUN_PAGES):
        del RUN_PAGES[name]
    EVENTS["trace_events"] = args.events
    compare = args.pages is None or COMPARE in args.pages
    root = args.keep or Path(tempfile.mkdtemp(prefix="tpuscope-scale-"))
    browser = open_browser() if args.browser else None
    try:
        results = {
            "runs": [one_run(root, n, browser, compare) for n in args.steps],
            "stores": [many_runs(root, n, browser) for n in args.runs],
        }
    finally:
        if browser is not None:
            browser.quit()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
