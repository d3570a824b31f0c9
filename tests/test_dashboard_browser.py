"""The Runs, Overview, Recompiles and Fallbacks pages in a real headless Chromium (Debian's,
through Selenium; tests/dashboard_browser.py has the store, server and helpers).

The store holds a real torch_xla run (the shared tiny example) and a synthetic run for what a
CPU run cannot produce yet. Every page must load with no console error or warning and no
request leaving the machine, show the numbers the store holds (checked against tpuscope's own
library, not the dashboard's code), and leave a screenshot.
"""

from __future__ import annotations

import pytest

from tests import dashboard_browser as shared
from tests.dashboard_browser import cell, expected, needs_chromium, plotted, text, visit, wait
from tpuscope.store import Run

# one Chromium, store and server per module, from the shared fixtures
browser, server, shots, store = shared.browser, shared.server, shared.shots, shared.store
pytestmark = needs_chromium


def test_runs_page_shows_the_store_and_compares_two_selected_runs(browser, server, store, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    visit(browser, server, "/", "page-runs", shots, "runs")
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 3,
    )
    for run_id in (store.real, store.traced, store.synth):
        run, summary = expected(store, run_id)
        findings = run.findings
        assert cell(browser, run_id, "steps") == str(summary["steps"])
        assert float(cell(browser, run_id, "p50_ms")) == round(summary["step_time_p50_ms"], 3)
        assert cell(browser, run_id, "recompiles") == str(summary["recompiles"])
        cpu = (
            run.fallbacks[run.fallbacks["op"] != "aten::_local_scalar_dense"]
            if not run.fallbacks.empty
            else run.fallbacks
        )
        assert cell(browser, run_id, "fallbacks") == str(
            int(cpu["count"].sum()) if not cpu.empty else 0
        )
        for sev in ("high", "medium", "low"):
            assert cell(browser, run_id, sev) == str(int((findings["severity"] == sev).sum()))
        assert cell(browser, run_id, "ended") == "finished"

    browser.find_element(By.ID, "runs-filter").send_keys("varlen")
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 1,
    )
    browser.find_element(By.ID, "runs-filter").send_keys(*[Keys.BACKSPACE] * len("varlen"))
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".ag-center-cols-container .ag-row")) == 3,
    )

    for run_id in (store.real, store.synth):
        browser.find_element(
            By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] input[type="checkbox"]'
        ).click()
    link = browser.find_element(By.ID, "compare-link")
    wait(
        browser,
        lambda d: link.get_attribute("href").endswith(f"/compare/{store.real}/{store.synth}"),
    )
    link.click()
    wait(browser, lambda d: d.find_elements(By.ID, "page-compare"))
    visit(
        browser,
        server,
        f"/compare/{store.real}/{store.synth}",
        "page-compare",
        shots,
        "compare",
        graphs=3,
    )
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
    visit(
        browser,
        server,
        f"/run/{store.synth}",
        "page-overview",
        shots,
        "overview-findings",
        graphs=1,
    )
    costs = [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".finding .cost")]
    stored = sorted(run.findings["cost_s"], reverse=True)
    assert costs == [f"~{c:,.2f} s lost" for c in stored]
    assert len(plotted(browser, "step-timeline")) == 3  # steps, compiles, fallback calls


def test_recompiles_page_lists_every_compile_and_shows_its_frames(browser, server, store, shots):
    from selenium.webdriver.common.by import By

    run = Run(store.root / store.real)
    visit(
        browser,
        server,
        f"/run/{store.real}/recompiles",
        "page-recompiles",
        shots,
        "recompiles",
        graphs=1,
    )
    rows = wait(
        browser,
        lambda d: d.find_elements(
            By.CSS_SELECTOR, "#compiles-grid .ag-center-cols-container .ag-row"
        ),
    )
    assert len(rows) == len(run.compiles)
    first = run.compiles.sort_values("time_ns").iloc[0]
    grid_seconds = browser.find_element(
        By.CSS_SELECTOR, '#compiles-grid div.ag-row[row-id="1"] div[col-id="seconds"]'
    )
    assert float(grid_seconds.text) == round(first["duration_ns"] / 1e9, 3)
    grid_seconds.click()
    detail = wait(browser, lambda d: d.find_elements(By.ID, "compile-detail"))[0]
    assert first["graph_hash"] in detail.text and first["location"].split(":")[0] in detail.text


def test_fallbacks_page_counts_match_the_store(browser, server, store, shots):
    run = Run(store.root / store.synth)
    visit(
        browser,
        server,
        f"/run/{store.synth}/fallbacks",
        "page-fallbacks",
        shots,
        "fallbacks",
        graphs=2,
    )
    cpu = run.fallbacks[
        run.fallbacks["op"] != "aten::_local_scalar_dense"
    ]  # value reads: host syncs
    assert text(browser, "stat-fallbacks") == f"{int(cpu['count'].sum()):,}"
    heat = plotted(browser, "fallback-heatmap")[0]
    assert sum(sum(row) for row in heat["z"]) == int(
        cpu["count"].sum()
    )  # value reads apart (issue 29)
    assert set(heat["y"]) == set(cpu["op"])
