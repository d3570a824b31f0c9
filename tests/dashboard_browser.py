"""What the dashboard's browser tests share: a real headless Chromium (Debian's, through
Selenium), a store with a real torch_xla run and a synthetic one, the dashboard served on a
loopback port, and `visit`, which opens a page, waits until it and its graphs are drawn and
fails on any console error or warning or any request leaving the machine.

The tests are by page: test_dashboard_browser.py (Runs, Overview, Recompiles, Fallbacks),
test_dashboard_device_browser.py (Churn, TensorCore, Trace, empty and error pages),
test_dashboard_live_browser.py (a run in progress, `tpuscope dashboard`) and
test_dashboard_hosts_browser.py (Hosts). The committed screenshots are made by
`scripts/screenshots.py` (it runs the examples and visits their pages through `visit`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tpuscope.detect.run_analysis import current
from tpuscope.store import Run

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
EXAMPLE = (
    "train_transformer.py",
    "--steps",
    "5",
    "--d-model",
    "32",
    "--layers",
    "1",
    "--vocab",
    "64",
    "--seq",
    "16",
)
# The traced head_dim-64 run of the device-view tests (same key: made once per session).
TRACED = (
    "transformer_head_dim64.py",
    "--steps",
    "5",
    "--seq",
    "128",
    "--d-model",
    "128",
    "--batch",
    "2",
    "--vocab",
    "128",
)
TRACED_TPUSCOPE = ("--deep", "--trace-steps", "2:4")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)

webdriver = pytest.importorskip("selenium.webdriver")
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver in /usr/bin",
)


@pytest.fixture(scope="module")
def store(example_run, tmp_path_factory) -> SimpleNamespace:
    from tests.synthetic import make_run

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
    from werkzeug.serving import make_server

    from tpuscope.dashboards import create_app

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


def new_driver(profile: Path) -> Any:
    """A headless Chromium that keeps its console log (visit checks it)."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = new_driver(tmp_path_factory.mktemp("chromium-profile"))
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
        " : null;",
        ident,
    )


def visit(
    browser,
    server: str,
    path: str,
    page: str,
    shots: Path,
    name: str,
    graphs: int = 0,
    missing: bool = False,
) -> None:
    """Open a page, wait until it and its graphs are drawn, check the console and network, screenshot.
    `missing`: the page names a run the store does not hold, so its own URL answers 404."""
    from selenium.webdriver.common.by import By

    browser.get(server + path)
    wait(browser, lambda d: d.find_elements(By.ID, page))
    wait(
        browser,
        lambda d: d.execute_script(
            "return document.querySelectorAll('.js-plotly-plot .main-svg').length >= arguments[0]"
            " && !document.querySelector('[data-dash-is-loading=\"true\"]');",
            graphs,
        ),
    )
    browser.save_screenshot(str(shots / f"{name}.png"))
    if os.environ.get("TPUSCOPE_SCREENSHOTS"):
        full_page_screenshot(browser, Path(os.environ["TPUSCOPE_SCREENSHOTS"]) / f"{name}.png")
    problems = [
        entry
        for entry in browser.get_log("browser")
        if entry["level"] in ("SEVERE", "WARNING")
        and not (
            missing
            and entry["message"].startswith(f"{server}{path} ")
            and "404" in entry["message"]
        )
    ]
    assert not problems, f"console of {path}: {problems}"
    resources = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert resources and all(r.startswith(server) for r in resources), [
        r for r in resources if not r.startswith(server)
    ]


def full_page_screenshot(browser, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(max(height + 40, 700), 2600))
    wait(
        browser,
        lambda d: (
            not d.execute_script("return document.querySelector('[data-dash-is-loading=\"true\"]')")
        ),
    )
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

    return browser.find_element(
        By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] div[col-id="{column}"]'
    ).text


TABS = ("", "recompiles", "fallbacks", "churn", "tensorcore", "trace", "hosts")  # every run page
UNMEASURED = re.compile(r"(?<![\w.\-])(nan|NaN|-1|Unknown|\?-bound)(?![\w.])")
PERCENT = re.compile(r"(?<![\d.,])(\d[\d,]*(?:\.\d+)?) ?%")


def shown(browser) -> str:
    """Every text of the page, SVG (figure titles, axes) and grid cells included, one text node a
    line (adjacent cells "7" and "97.9%" are not one "797.9%")."""
    return browser.execute_script(
        "const w = document.createTreeWalker(document.getElementById('page'), NodeFilter.SHOW_TEXT);"
        "const out = []; while (w.nextNode()) out.push(w.currentNode.nodeValue); return out.join('\\n');"
    )


def untrue(page_text: str) -> list[str]:
    shares = [
        m.group(0) for m in PERCENT.finditer(page_text) if float(m.group(1).replace(",", "")) > 100
    ]
    return sorted({m.group(0) for m in UNMEASURED.finditer(page_text)} | set(shares))
