"""The dashboard in a real headless Chromium (Debian's, through Selenium).

The store holds a real torch_xla run (the shared tiny example) and a synthetic run
for what a CPU run cannot produce yet (shape churn findings, HLO dots, a trace).
Every page must load with no console error or warning and no request leaving
the machine, show the numbers the store holds (checked against tpuscope's own
library, not the dashboard's code), and leave a screenshot. Set
TPUSCOPE_SCREENSHOTS=docs/screenshots to refresh the committed ones.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.request import urlopen

import pandas as pd
import pytest

from tests.conftest import ROOT, tpuscope_cmd
from tpuscope.analyze.shapes import parse_shape
from tpuscope.detect.run_analysis import current
from tpuscope.store import Run

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
EXAMPLE = ("train_transformer.py", "--steps", "5", "--d-model", "32", "--layers", "1", "--vocab", "64", "--seq", "16")
# The traced head_dim-64 run of the device-view tests (same key: made once per session).
TRACED = ("transformer_head_dim64.py", "--steps", "5", "--seq", "128", "--d-model", "128", "--batch", "2",
          "--vocab", "128")
TRACED_TPUSCOPE = ("--deep", "--trace-steps", "2:4")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1000")

webdriver = pytest.importorskip("selenium.webdriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                                reason="needs Debian's chromium and chromium-driver in /usr/bin")


@pytest.fixture(scope="module")
def store(example_run, tmp_path_factory) -> SimpleNamespace:
    from tpuscope_dashboards.synthetic import make_run

    real_dir, proc = example_run(*EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    traced_dir, proc = example_run(*TRACED, tpuscope_args=TRACED_TPUSCOPE)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path_factory.mktemp("dash-store")
    for run_dir in (real_dir, traced_dir):
        shutil.copytree(run_dir, root / run_dir.name)
    synth = make_run(root, "train_varlen", steps=120, trace_events=8_000, recompiles=8)
    return SimpleNamespace(root=root, real=real_dir.name, traced=traced_dir.name, synth=synth.name)


@contextlib.contextmanager
def serving(root: Path) -> Iterator[str]:
    """The dashboard over `root` on a free loopback port, in a thread; yields its URL."""
    from tpuscope_dashboards import create_app
    from werkzeug.serving import make_server

    srv = make_server("127.0.0.1", 0, create_app(root).server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        thread.join(10)


@pytest.fixture(scope="module")
def server(store):
    with serving(store.root) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def wait(browser, condition, timeout: float = 30) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.1).until(condition)


def plotted(browser, ident: str) -> list[dict[str, Any]]:
    """The traces Plotly drew in the dcc.Graph `ident` (x/y/z arrays and names)."""
    return browser.execute_script(  # numpy arrays arrive base64-typed: decode them to plain arrays
        "const plain = v => v == null ? null : ArrayBuffer.isView(v) ? Array.from(v)"
        "  : Array.isArray(v) ? v.map(plain) : v._inputArray ? plain(v._inputArray) : v;"
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return gd && gd.data ? gd.data.map(t => ({name: t.name, mode: t.mode, x: plain(t.x), y: plain(t.y),"
        " z: plain(t.z)}))"
        " : null;", ident)


def visit(browser, server: str, path: str, page: str, shots: Path, name: str, graphs: int = 0) -> None:
    """Open a page, wait until it and its graphs are drawn, check the console and network, screenshot."""
    from selenium.webdriver.common.by import By

    browser.get(server + path)
    wait(browser, lambda d: d.find_elements(By.ID, page))
    wait(browser, lambda d: d.execute_script(
        "return document.querySelectorAll('.js-plotly-plot .main-svg').length >= arguments[0]"
        " && !document.querySelector('[data-dash-is-loading=\"true\"]');", graphs))
    browser.save_screenshot(str(shots / f"{name}.png"))
    if os.environ.get("TPUSCOPE_SCREENSHOTS"):
        full_page_screenshot(browser, Path(os.environ["TPUSCOPE_SCREENSHOTS"]) / f"{name}.png")
    problems = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert not problems, f"console of {path}: {problems}"
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(server) for r in resources), [r for r in resources if not r.startswith(server)]


def full_page_screenshot(browser, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(max(height + 40, 700), 2600))
    wait(browser, lambda d: not d.execute_script("return document.querySelector('[data-dash-is-loading=\"true\"]')"))
    browser.save_screenshot(str(target))
    browser.set_window_size(1400, 1000)


def text(browser, ident: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, ident).text


def expected(store, run_id: str) -> tuple[Run, dict[str, Any]]:
    """The run and its one analysis, as every surface reads it (tpuscope.detect.run_analysis)."""
    run = Run(store.root / run_id)
    return run, current(run).summary


def cell(browser, run_id: str, column: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] div[col-id="{column}"]').text


def test_runs_page_shows_the_store_and_compares_two_selected_runs(browser, server, store, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    visit(browser, server, "/", "page-runs", shots, "runs")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 3)
    for run_id in (store.real, store.traced, store.synth):
        run, summary = expected(store, run_id)
        findings = run.findings
        assert cell(browser, run_id, "steps") == str(summary["steps"])
        assert float(cell(browser, run_id, "p50_ms")) == round(summary["step_time_p50_ms"], 3)
        assert cell(browser, run_id, "recompiles") == str(summary["recompiles"])
        cpu = run.fallbacks[run.fallbacks["op"] != "aten::_local_scalar_dense"] if not run.fallbacks.empty \
            else run.fallbacks
        assert cell(browser, run_id, "fallbacks") == str(int(cpu["count"].sum()) if not cpu.empty else 0)
        for sev in ("high", "medium", "low"):
            assert cell(browser, run_id, sev) == str(int((findings["severity"] == sev).sum()))
        assert cell(browser, run_id, "ended") == "finished"

    browser.find_element(By.ID, "runs-filter").send_keys("varlen")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 1)
    browser.find_element(By.ID, "runs-filter").send_keys(*[Keys.BACKSPACE] * len("varlen"))
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 3)

    for run_id in (store.real, store.synth):
        browser.find_element(By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] input[type="checkbox"]').click()
    link = browser.find_element(By.ID, "compare-link")
    wait(browser, lambda d: link.get_attribute("href").endswith(f"/compare/{store.real}/{store.synth}"))
    link.click()
    wait(browser, lambda d: d.find_elements(By.ID, "page-compare"))
    visit(browser, server, f"/compare/{store.real}/{store.synth}", "page-compare", shots, "compare", graphs=3)
    for side, run_id in (("a", store.real), ("b", store.synth)):
        run, summary = expected(store, run_id)
        assert text(browser, f"cmp-{side}-steps") == f"{summary['steps']:,}"
        assert text(browser, f"cmp-{side}-p50") == f"{summary['step_time_p50_ms']:,.2f} ms"
        assert text(browser, f"cmp-{side}-recompiles") == str(summary["recompiles"])
    added = len(Run(store.root / store.synth).findings)
    assert text(browser, "findings-added") == f"New in B ({added})"


def test_overview_of_a_real_run_matches_the_store(browser, server, store, shots):
    run, summary = expected(store, store.real)
    visit(browser, server, f"/run/{store.real}", "page-overview", shots, "overview", graphs=1)
    assert text(browser, "stat-steps") == f"{summary['steps']:,}"
    assert text(browser, "stat-p50") == f"{summary['step_time_p50_ms']:,.2f} ms"
    assert text(browser, "stat-p90") == f"{summary['step_time_p90_ms']:,.2f} ms"
    assert text(browser, "stat-compiles") == str(len(run.compiles))
    assert text(browser, "stat-recompiles") == str(summary["recompiles"])
    line, marks = plotted(browser, "step-timeline")[:2]
    assert line["x"] == run.steps["step"].tolist()
    assert line["y"] == pytest.approx((run.steps["wall_ns"] / 1e6).tolist())
    assert marks["x"] == run.compiles["step"].tolist()


def test_overview_of_a_run_with_findings_orders_cards_by_cost(browser, server, store, shots):
    from selenium.webdriver.common.by import By

    run = Run(store.root / store.synth)
    visit(browser, server, f"/run/{store.synth}", "page-overview", shots, "overview-findings", graphs=1)
    costs = [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".finding .cost")]
    stored = sorted(run.findings["cost_s"], reverse=True)
    assert costs == [f"~{c:,.2f} s lost" for c in stored]
    assert len(plotted(browser, "step-timeline")) == 3  # steps, compiles, fallback calls


def test_recompiles_page_lists_every_compile_and_shows_its_frames(browser, server, store, shots):
    from selenium.webdriver.common.by import By

    run = Run(store.root / store.real)
    visit(browser, server, f"/run/{store.real}/recompiles", "page-recompiles", shots, "recompiles", graphs=1)
    rows = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#compiles-grid .ag-center-cols-container .ag-row"))
    assert len(rows) == len(run.compiles)
    first = run.compiles.sort_values("time_ns").iloc[0]
    grid_seconds = browser.find_element(By.CSS_SELECTOR, '#compiles-grid div.ag-row[row-id="1"] div[col-id="seconds"]')
    assert float(grid_seconds.text) == round(first["duration_ns"] / 1e9, 3)
    grid_seconds.click()
    detail = wait(browser, lambda d: d.find_elements(By.ID, "compile-detail"))[0]
    assert first["graph_hash"] in detail.text and first["location"].split(":")[0] in detail.text


def test_fallbacks_page_counts_match_the_store(browser, server, store, shots):
    run = Run(store.root / store.synth)
    visit(browser, server, f"/run/{store.synth}/fallbacks", "page-fallbacks", shots, "fallbacks", graphs=2)
    cpu = run.fallbacks[run.fallbacks["op"] != "aten::_local_scalar_dense"]  # value reads: host syncs
    assert text(browser, "stat-fallbacks") == f"{int(cpu['count'].sum()):,}"
    heat = plotted(browser, "fallback-heatmap")[0]
    assert sum(sum(row) for row in heat["z"]) == int(run.fallbacks["count"].sum())
    assert set(heat["y"]) == set(run.fallbacks["op"])


def test_churn_tensorcore_and_trace_pages_render_their_data(browser, server, store, shots):
    from selenium.webdriver.common.by import By

    run = Run(store.root / store.synth)
    churn = next(f.evidence["shape_churn"] for f in run.findings_list()
                 if f.rule == "recompile" and f.evidence.get("shape_churn"))
    named = run.compiles[run.compiles["graph_hash"].isin(churn["graph_hashes"])].sort_values("step")
    sizes = [parse_shape(s[churn["arg"]]).dims[churn["dim"]] for s in named["input_shapes"]]
    visit(browser, server, f"/run/{store.synth}/churn", "page-churn", shots, "churn", graphs=2)
    assert plotted(browser, "churn-graph-0")[0]["y"] == sizes

    visit(browser, server, f"/run/{store.synth}/tensorcore", "page-tensorcore", shots, "tensorcore", graphs=1)
    assert text(browser, "stat-dots") == "6"
    assert text(browser, "stat-mxu") == "31.5 %"

    events = pd.read_parquet(store.root / store.synth / "trace_events")
    visit(browser, server, f"/run/{store.synth}/trace", "page-trace", shots, "trace", graphs=2)
    assert text(browser, "stat-events") == f"{len(events):,}"
    title = browser.find_element(By.CSS_SELECTOR, "#trace-timeline .gtitle")
    assert f"3,000 longest of {len(events):,}" in title.text
    t0 = int(events["start_ns"].min())
    lo, hi = 100.0, 101.0  # ms since trace start
    in_view = ((events["start_ns"] <= t0 + hi * 1e6) & (events["start_ns"] + events["dur_ns"] >= t0 + lo * 1e6)).sum()
    polls = iter(range(10**6))

    def zoomed(d) -> bool:
        """Zoom (again every 5 s: on a loaded machine the first relayout can come before
        dcc.Graph listens), until the server's re-drawn figure is in."""
        if next(polls) % 50 == 0:
            d.execute_script("Plotly.relayout(document.querySelector('#trace-timeline .js-plotly-plot'),"
                             "{'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]});", lo, hi)
        return f"all {in_view:,} events in view" in d.find_element(By.CSS_SELECTOR, "#trace-timeline .gtitle").text

    wait(browser, zoomed, timeout=60)
    drawn = plotted(browser, "trace-timeline")  # line segments: start, end and a gap per event
    assert sum(len(lane["x"]) for lane in drawn if lane["mode"] == "lines") == 3 * in_view


def test_tensorcore_and_trace_pages_of_a_real_traced_run(browser, server, store, shots):
    from tpuscope.analyze.mxu import matmuls

    run = Run(store.root / store.traced)
    visit(browser, server, f"/run/{store.traced}/tensorcore", "page-tensorcore", shots, "tensorcore-real", graphs=2)
    assert text(browser, "stat-dots") == str(len(matmuls(run.hlo_ops)))
    busy, idle = run.device_steps["busy_ns"].sum(), run.device_steps["idle_ns"].sum()
    assert text(browser, "stat-duty") == f"{100 * busy / (busy + idle):.1f} %"
    bars = plotted(browser, "busy-idle")
    assert bars[0]["x"] == sorted(run.device_steps["step"].unique().tolist())

    visit(browser, server, f"/run/{store.traced}/trace", "page-trace", shots, "trace-real", graphs=2)
    assert text(browser, "stat-events") == f"{len(run.trace_events):,}"
    assert "xprof --logdir" in text(browser, "trace-links")


@pytest.mark.parametrize(("page", "says"), [("churn", "No shape churn"), ("tensorcore", "tpuscope run --deep"),
                                            ("trace", "tpuscope run --trace-steps")])
def test_pages_without_data_say_so_and_how_to_get_it(browser, server, store, shots, page, says):
    visit(browser, server, f"/run/{store.real}/{page}", f"page-{page}", shots, f"empty-{page}")
    assert says in text(browser, f"no-{page}")


@pytest.mark.parametrize(("path", "message"), [
    ("/run/..%2F..%2Fetc", "not a valid run id"), ("/run/nope-123", "no run 'nope-123'"),
    ("/compare/a..b/x", "not a valid run id"),
])
def test_bad_run_ids_give_an_error_page(browser, server, shots, path, message):
    visit(browser, server, path, "error-message", shots, "error-" + re.sub(r"\W+", "-", path))
    assert message in text(browser, "error-message")


LIVE = ROOT / "tests" / "programs" / "live.py"


LIVE_S = 2.0  # the dashboard's tick for live runs (components.LIVE_MS)


def _callbacks(browser) -> int:
    """Callback requests the page has made since it loaded."""
    return browser.execute_script("return performance.getEntriesByType('resource')"
                                  ".filter(e => e.name.includes('_dash-update-component')).length")


def _now(browser, ident: str) -> str:
    """The text of an element that a live page may be replacing this very moment."""
    return browser.execute_script("const el = document.getElementById(arguments[0]);"
                                  "return el === null ? null : el.textContent;", ident)


def _step_count(browser) -> int:
    return int((_now(browser, "stat-steps") or "0").replace(",", ""))


def test_a_run_in_progress_is_live_and_its_pages_update_by_themselves(browser, tmp_path, shots):
    """A real torch_xla program still running: the Runs page marks it live, its Overview shows
    new steps and its Recompiles page a new recompile without a reload, and both stop updating
    (the mark gone, the final numbers shown) once the program has ended."""
    from selenium.webdriver.common.by import By

    root, control = tmp_path / "store", tmp_path / "control"
    control.mkdir()
    proc = subprocess.Popen(tpuscope_cmd("run", "--store", str(root), "--name", "live", "--quiet",
                                         "python", str(LIVE), str(control)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(root.glob("live-*/steps/part-*.parquet")):  # the first steps are flushed
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        run_id = next(root.glob("live-*")).name
        with serving(root) as url:
            visit(browser, url, "/", "page-runs", shots, "live-runs")
            badge = wait(browser, lambda d: d.find_elements(
                By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] div[col-id="link"] .badge.live'))
            assert badge[0].text.lower() == "live"
            assert cell(browser, run_id, "ended") == "running"

            visit(browser, url, f"/run/{run_id}", "page-overview", shots, "live-overview", graphs=1)
            assert _now(browser, "live-badge").lower() == "live"
            first = _step_count(browser)
            wait(browser, lambda d: _step_count(d) >= first + 4, timeout=60)  # no reload: the page ticks
            assert len(plotted(browser, "step-timeline")[0]["x"]) >= first + 4

            visit(browser, url, f"/run/{run_id}/recompiles", "page-recompiles", shots, "live-recompiles",
                  graphs=1)
            assert _now(browser, "stat-recompiles") == "0"
            (control / "recompile").touch()  # the program's next step gets a short batch
            wait(browser, lambda d: _now(d, "stat-recompiles") == "1", timeout=60)
            wait(browser, lambda d: d.execute_script(
                "return [...document.querySelectorAll('#compiles-grid .ag-row [col-id=\"when\"]')]"
                ".some(c => c.textContent === 'recompile');"))

            (control / "stop").touch()
            assert proc.wait(120) == 0, proc.stderr.read()
            wait(browser, lambda d: not d.find_elements(By.ID, "live-badge"), timeout=30)
            run, summary = expected(SimpleNamespace(root=root), run_id)
            assert _now(browser, "stat-recompiles") == str(summary["recompiles"]) == "1"
            assert _now(browser, "stat-compiles") == str(len(run.compiles))
            updates = _callbacks(browser)
            time.sleep(3 * LIVE_S)
            assert _callbacks(browser) == updates  # the timer stopped with the run
            problems = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
            assert not problems, problems
            visit(browser, url, f"/run/{run_id}", "page-overview", shots, "ended-overview", graphs=1)
            assert not browser.find_elements(By.ID, "live-badge")
            assert _step_count(browser) == summary["steps"]
    finally:
        (control / "stop").touch()
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_cli_serves_on_loopback_and_prints_the_url(store):
    proc = subprocess.Popen([sys.executable, "-m", "tpuscope", "dashboard", "--store", str(store.root), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line + proc.stderr.read()
        with urlopen(url.group(0), timeout=30) as response:
            assert response.status == 200 and b"<title>tpuscope</title>" in response.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bad = subprocess.run([sys.executable, "-m", "tpuscope", "dashboard", "--store", str(store.root / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("tpuscope: no run store at ") and bad.stderr.count("\n") == 1


def screenshot_docs(store_root: Path, out: Path) -> None:
    """Full-page screenshots of a store's pages for docs/: `python tests/test_dashboard_browser.py STORE OUT`.

    Runs are picked by name, real runs of the examples: variable_length, variable_length_bucketed
    (`--buckets 48,64`), host_sync_fallback, transformer_head_dim64 (`--deep --trace-steps 2:4`).
    """
    import tempfile

    from selenium.webdriver.chrome.service import Service
    from tpuscope_dashboards import create_app
    from werkzeug.serving import make_server

    app = create_app(store_root)
    ids = {app.tpuscope_data.meta(r).get("name"): r for r in app.tpuscope_data.run_ids()}
    pages = [("runs", "/", "page-runs", 0),
             ("overview", f"/run/{ids['variable_length']}", "page-overview", 1),
             ("recompiles", f"/run/{ids['variable_length']}/recompiles", "page-recompiles", 1),
             ("churn", f"/run/{ids['variable_length']}/churn", "page-churn", 1),
             ("fallbacks", f"/run/{ids['host_sync_fallback']}/fallbacks", "page-fallbacks", 1),
             ("compare", f"/compare/{ids['variable_length']}/{ids['variable_length_bucketed']}", "page-compare", 3),
             ("tensorcore", f"/run/{ids['transformer_head_dim64']}/tensorcore", "page-tensorcore", 2),
             ("trace", f"/run/{ids['transformer_head_dim64']}/trace", "page-trace", 2)]
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tempfile.mkdtemp()}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    os.environ["TPUSCOPE_SCREENSHOTS"] = str(out)
    try:
        for name, path, page, graphs in pages:
            visit(driver, f"http://127.0.0.1:{srv.server_port}", path, page, Path(tempfile.mkdtemp()), name, graphs)
            print(out / f"{name}.png")
    finally:
        driver.quit()
        srv.shutdown()


if __name__ == "__main__":
    screenshot_docs(Path(sys.argv[1]), Path(sys.argv[2]))
