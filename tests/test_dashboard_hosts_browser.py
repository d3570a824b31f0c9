"""The Hosts page in a real headless Chromium, over the simulated pod of tests/pod_run.py.

The page must draw the step time of every host and step as tpuscope's own library computes
it, name the straggler and the divergent lines the analysis found, say how each host ended,
and tell a one-host run how to get a pod run; with no console error and no request leaving
the machine (the helpers of tests/dashboard_browser.py check both).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from tests import dashboard_browser as base
from tests.dashboard_browser import CHROMEDRIVER, CHROMIUM, plotted, text, visit, wait
from tests.pod_run import RUN_ID, pod_run
from tpuscope.analyze.hosts import natural_key
from tpuscope.analyze.judge import judged_steps
from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

browser, shots = base.browser, base.shots  # the same fixtures: one Chromium, screenshots kept
pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver in /usr/bin",
)


@pytest.fixture(scope="module")
def pod_store(tmp_path_factory) -> SimpleNamespace:
    from tests.synthetic import make_run

    made = pod_run(tmp_path_factory.getbasetemp())
    analyze(Run(made.run_dir))  # written into the run, as `tpuscope show --reanalyze` does
    single = make_run(made.store, "one_host", steps=30, trace_events=0, recompiles=0, device=False)
    return SimpleNamespace(root=made.store, run=Run(made.run_dir), single=single.name)


@pytest.fixture(scope="module")
def server(pod_store):
    from werkzeug.serving import make_server

    from tpuscope.dashboards import create_app

    srv = make_server("127.0.0.1", 0, create_app(pod_store.root).server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    thread.join(10)


def cell(browser, grid: str, row: str, column: str) -> str:
    from selenium.webdriver.common.by import By

    selector = f'#{grid} div.ag-row[row-id="{row}"] div[col-id="{column}"]'
    return browser.find_element(By.CSS_SELECTOR, selector).text


def test_hosts_page_shows_every_host_and_step_as_the_store_holds_them(
    browser, server, pod_store, shots
):
    from selenium.webdriver.common.by import By

    run = pod_store.run
    visit(browser, server, f"/run/{RUN_ID}/hosts", "page-hosts", shots, "hosts", graphs=1)
    report = analyze(Run(run.path), redetect=False)
    assert text(browser, "stat-hosts") == str(len(report.summary["hosts"])) == "5"
    stragglers = [f for f in report.findings if f.rule == "straggler"]
    assert text(browser, "stat-stragglers") == str(len(stragglers))
    assert (
        "host-3" in browser.find_element(By.ID, "stat-stragglers").find_element(By.XPATH, "..").text
    )
    divergent = [f for f in report.findings if f.rule == "rank_divergence"]
    assert text(browser, "stat-divergent") == str(len(divergent))

    (heat,) = plotted(browser, "host-heatmap")
    judged = judged_steps(run.steps, int(run.meta["warmup"]))  # each host's slowest process, in ms
    matrix = judged.pivot_table(index="host", columns="step", values="wall_ns", aggfunc="max") / 1e6
    matrix = matrix.loc[sorted(matrix.index, key=natural_key)]
    assert heat["y"] == list(matrix.index) == [f"host-{k}" for k in range(5)]
    assert heat["x"] == [int(s) for s in matrix.columns]
    for drawn, expected in zip(heat["z"], matrix.to_numpy().tolist(), strict=True):
        drawn = [float("nan") if v is None else v for v in drawn]  # a step the lost host never ran
        assert drawn == pytest.approx(expected, nan_ok=True)

    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#host-grid div.ag-row[row-id="host-4"]'),
    )
    assert cell(browser, "host-grid", "host-3", "straggler") == "yes"
    assert cell(browser, "host-grid", "host-0", "straggler") == ""
    assert cell(browser, "host-grid", "host-4", "status").startswith("lost")
    assert cell(browser, "host-grid", "host-1", "rules") == "rank_divergence, recompile"
    sites = {
        e.text
        for e in browser.find_elements(By.CSS_SELECTOR, '#divergence-grid div[col-id="site"]')
    }
    assert {f.location.rsplit("/", 1)[-1] for f in divergent} <= sites
    tab = browser.find_element(By.ID, "tab-hosts")
    assert tab.get_attribute("href").endswith(
        f"/run/{RUN_ID}/hosts"
    ) and "active" in tab.get_attribute("class")


def test_hosts_page_of_a_one_host_run_says_how_to_get_a_pod_run(browser, server, pod_store, shots):
    visit(browser, server, f"/run/{pod_store.single}/hosts", "page-hosts", shots, "hosts-one")
    assert "tpuscope run --run-id" in text(browser, "no-hosts")
