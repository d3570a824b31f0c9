"""Every number the dashboard shows is true and readable (issue 29), in a real headless Chromium
(tests/dashboard_browser.py): every page of a finished torch_xla run (the golden
fallback_host_sync sample, analysed here) and of an imported TPU and GPU trace (real files from
../shared/real_traces) shows no `nan`, `-1`, `Unknown` or share above 100%; the counts one page
shows agree with the others and with the report (CPU fallback calls without the value reads,
graphs as the CLI counts them); an unknown run's URL answers 404; the Runs table is as tall as
the window lets it be."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from tests import dashboard_browser as shared
from tests.conftest import ROOT, real_trace, run_tpuscope
from tests.dashboard_browser import (
    TABS,
    needs_chromium,
    plotted,
    serving,
    shown,
    text,
    untrue,
    visit,
    wait,
)
from tpuscope.detect.run_analysis import analyze, current
from tpuscope.store import Run

browser, shots = shared.browser, shared.shots
pytestmark = needs_chromium
COPIES = 24  # more runs than the ~10 rows a fixed-height table showed


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("numbers-store")
    finished = root / "fallback_host_sync"
    shutil.copytree(ROOT / "sample_traces" / "fallback_host_sync", finished)
    analyze(Run(finished))  # stored with its parts' digest: the copies below read it as current
    for i in range(COPIES):
        shutil.copytree(finished, root / f"fallback_host_sync-copy{i:02d}")
    for name, trace in (
        ("tpu", "xplane/tpu_inference_2.xplane.pb"),
        ("gpu", "xplane/34.83.195.179_6003.xplane.pb"),
    ):
        proc = run_tpuscope(
            "import", "--store", str(root), "--quiet", "--name", name, str(real_trace(trace))
        )
        assert proc.returncode == 0, proc.stderr
    ids = {
        name: next(p.name for p in root.iterdir() if p.name.startswith(f"{name}-"))
        for name in ("tpu", "gpu")
    }
    return SimpleNamespace(root=root, finished=finished.name, **ids)


@pytest.fixture(scope="module")
def server(store):
    with serving(store.root) as url:
        yield url


@pytest.mark.parametrize("which", ["finished", "tpu", "gpu"])
def test_no_page_shows_a_figure_nobody_measured(browser, server, store, shots, which: str) -> None:
    run_id = getattr(store, which)
    for tab in TABS:
        path = f"/run/{run_id}" + (f"/{tab}" if tab else "")
        visit(
            browser,
            server,
            path,
            f"page-{tab or 'overview'}",
            shots,
            f"{which}-{tab or 'overview'}",
        )
        page_text = shown(browser)
        assert untrue(page_text) == [], (path, untrue(page_text))


def test_fallback_counts_agree_and_leave_value_reads_apart(browser, server, store, shots) -> None:
    summary = current(Run(store.root / store.finished)).summary
    cpu = sum(op["count"] for op in summary["fallback_ops"])
    assert summary["value_reads"] > 0 and cpu > 0  # the sample has both
    visit(
        browser,
        server,
        f"/run/{store.finished}",
        "page-overview",
        shots,
        "agree-overview",
        graphs=1,
    )
    assert text(browser, "stat-fallbacks") == f"{cpu:,}"
    bars = [t for t in plotted(browser, "step-timeline") if t["name"] == "CPU fallback calls"]
    assert bars and sum(bars[0]["y"]) == cpu
    visit(
        browser,
        server,
        f"/run/{store.finished}/fallbacks",
        "page-fallbacks",
        shots,
        "agree-fallbacks",
        graphs=1,
    )
    assert text(browser, "stat-fallbacks") == f"{cpu:,}"
    assert text(browser, "stat-syncs") == f"{summary['value_reads']:,}"
    heat = plotted(browser, "fallback-heatmap")[0]
    assert "aten::_local_scalar_dense" not in heat["y"]
    assert sum(sum(v for v in row if v) for row in heat["z"]) == cpu
    visit(
        browser,
        server,
        f"/run/{store.finished}/recompiles",
        "page-recompiles",
        shots,
        "agree-recompiles",
    )
    assert text(browser, "stat-graphs") == str(summary["graphs"])


def test_an_unknown_run_answers_404_and_says_so(browser, server, store, shots) -> None:
    for path in (
        "/run/no-such-run",
        "/run/no-such-run/fallbacks",
        f"/compare/{store.finished}/no-such-run",
    ):
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(server + path, timeout=30)
        assert answer.value.code == 404, path
    with urllib.request.urlopen(server + f"/run/{store.finished}", timeout=30) as ok:
        assert ok.status == 200
    visit(browser, server, "/run/no-such-run", "error-message", shots, "unknown-run", missing=True)
    assert "no-such-run" in text(browser, "error-message")


def test_the_runs_table_fills_the_window_and_shows_every_id_whole(
    browser, server, store, shots
) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, server, "/", "page-runs", shots, "runs-tall")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row"))
    grid_height = browser.execute_script("return document.getElementById('runs-grid').clientHeight")
    window = browser.execute_script("return window.innerHeight")
    assert grid_height > 600 and grid_height >= window - 300, (grid_height, window)
    rows = browser.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")
    assert len(rows) > 12
    # One script reads every link and whether its cell shows it whole: the grid re-renders
    # its rows while it settles, so an element found in one call may be stale in the next.
    read_links = """return [...document.querySelectorAll('a.run-link')].map(a => {
        const cell = a.closest('.ag-cell');
        return [a.textContent, !!cell && cell.scrollWidth <= cell.clientWidth];});"""
    links = wait(
        browser,
        lambda d: (
            (found := d.execute_script(read_links))
            and {store.tpu, store.gpu} <= {name for name, _ in found}
            and found
        ),
    )
    cut = [name for name, whole in links if not whole]
    assert not cut, cut
