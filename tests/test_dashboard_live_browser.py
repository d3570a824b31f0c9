"""A run in progress in a real headless Chromium: the Runs page marks it live and its pages
update by themselves until it ends; and `tpuscope dashboard` serving on loopback
(tests/dashboard_browser.py has the store, server and helpers).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from types import SimpleNamespace
from urllib.request import urlopen

from tests import dashboard_browser as shared
from tests.conftest import ROOT, tpuscope_cmd
from tests.dashboard_browser import (
    TABS,
    cell,
    expected,
    needs_chromium,
    plotted,
    serving,
    shown,
    untrue,
    visit,
    wait,
)

# one Chromium, store and server per module, from the shared fixtures
browser, server, shots, store = shared.browser, shared.server, shared.shots, shared.store
pytestmark = needs_chromium


LIVE = ROOT / "tests" / "programs" / "live.py"


LIVE_S = 2.0  # the dashboard's tick for live runs (components.LIVE_MS)


def _callbacks(browser) -> int:
    """Callback requests the page has made since it loaded."""
    return browser.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('_dash-update-component')).length"
    )


def _now(browser, ident: str) -> str:
    """The text of an element that a live page may be replacing this very moment."""
    return browser.execute_script(
        "const el = document.getElementById(arguments[0]);"
        "return el === null ? null : el.textContent;",
        ident,
    )


def _step_count(browser) -> int:
    return int((_now(browser, "stat-steps") or "0").replace(",", ""))


def test_a_run_in_progress_is_live_and_its_pages_update_by_themselves(browser, tmp_path, shots):
    """A real torch_xla program still running: the Runs page marks it live, its Overview shows
    new steps and its Recompiles page a new recompile without a reload, and both stop updating
    (the mark gone, the final numbers shown) once the program has ended."""
    from selenium.webdriver.common.by import By

    root, control = tmp_path / "store", tmp_path / "control"
    control.mkdir()
    proc = subprocess.Popen(
        tpuscope_cmd(
            "run",
            "--store",
            str(root),
            "--name",
            "live",
            "--quiet",
            "python",
            str(LIVE),
            str(control),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(root.glob("live-*/steps/part-*.parquet")):  # the first steps are flushed
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        run_id = next(root.glob("live-*")).name
        with serving(root) as url:
            visit(browser, url, "/", "page-runs", shots, "live-runs")
            badge = wait(
                browser,
                lambda d: d.find_elements(
                    By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] div[col-id="link"] .badge.live'
                ),
            )
            assert badge[0].text.lower() == "live"
            assert cell(browser, run_id, "ended") == "running"

            visit(browser, url, f"/run/{run_id}", "page-overview", shots, "live-overview", graphs=1)
            assert _now(browser, "live-badge").lower() == "live"
            first = _step_count(browser)
            wait(
                browser, lambda d: _step_count(d) >= first + 4, timeout=60
            )  # no reload: the page ticks
            assert len(plotted(browser, "step-timeline")[0]["x"]) >= first + 4

            visit(
                browser,
                url,
                f"/run/{run_id}/recompiles",
                "page-recompiles",
                shots,
                "live-recompiles",
                graphs=1,
            )
            assert _now(browser, "stat-recompiles") == "0"
            (control / "recompile").touch()  # the program's next step gets a short batch
            wait(browser, lambda d: _now(d, "stat-recompiles") == "1", timeout=60)
            wait(
                browser,
                lambda d: d.execute_script(
                    "return [...document.querySelectorAll('#compiles-grid .ag-row [col-id=\"when\"]')]"
                    ".some(c => c.textContent === 'recompile');"
                ),
            )

            for tab in (
                TABS
            ):  # every page of the run while it is live: no figure nobody measured (issue 29)
                path = f"/run/{run_id}" + (f"/{tab}" if tab else "")
                visit(
                    browser,
                    url,
                    path,
                    f"page-{tab or 'overview'}",
                    shots,
                    f"live-{tab or 'overview'}",
                )
                assert untrue(shown(browser)) == [], (path, untrue(shown(browser)))
            assert proc.poll() is None  # the pages above were those of a run in progress
            # back on a page with live figures: the walk above ended on the last tab
            visit(
                browser,
                url,
                f"/run/{run_id}/recompiles",
                "page-recompiles",
                shots,
                "live-recompiles",
                graphs=1,
            )

            (control / "stop").touch()
            assert proc.wait(120) == 0, proc.stderr.read()
            wait(browser, lambda d: not d.find_elements(By.ID, "live-badge"), timeout=30)
            run, summary = expected(SimpleNamespace(root=root), run_id)
            # the short batch stays a recompile until the loop has run past it as long as before it;
            # then the family is a bounded set (analyze/families.py): which one depends on when the
            # program was stopped, and the page states what the analysis states
            assert _now(browser, "stat-recompiles") == str(summary["recompiles"])
            assert summary["recompiles"] in (0, 1)
            assert _now(browser, "stat-compiles") == str(len(run.compiles))
            updates = _callbacks(browser)
            time.sleep(3 * LIVE_S)
            assert _callbacks(browser) == updates  # the timer stopped with the run
            problems = [
                e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")
            ]
            assert not problems, problems
            visit(
                browser, url, f"/run/{run_id}", "page-overview", shots, "ended-overview", graphs=1
            )
            assert not browser.find_elements(By.ID, "live-badge")
            assert _step_count(browser) == summary["steps"]
    finally:
        (control / "stop").touch()
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_cli_serves_on_loopback_and_prints_the_url(store):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpuscope", "dashboard", "--store", str(store.root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line + proc.stderr.read()
        with urlopen(url.group(0), timeout=30) as response:
            assert response.status == 200 and b"<title>tpuscope</title>" in response.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bad = subprocess.run(
        [sys.executable, "-m", "tpuscope", "dashboard", "--store", str(store.root / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        bad.returncode == 2
        and bad.stderr.startswith("tpuscope: no run store at ")
        and bad.stderr.count("\n") == 1
    )
