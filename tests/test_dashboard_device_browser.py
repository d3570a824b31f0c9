"""The Churn, TensorCore and Trace pages in a real headless Chromium, of a synthetic run (shape
churn, HLO dots, a trace) and a real traced torch_xla run; pages without data and bad run ids
(tests/dashboard_browser.py has the store, server and helpers).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from tests import dashboard_browser as shared
from tests.dashboard_browser import needs_chromium, plotted, text, visit, wait
from tpuscope.analyze.shapes import parse_shape
from tpuscope.store import Run

# one Chromium, store and server per module, from the shared fixtures
browser, server, shots, store = shared.browser, shared.server, shared.shots, shared.store
pytestmark = needs_chromium


def test_churn_tensorcore_and_trace_pages_render_their_data(browser, server, store, shots):
    from selenium.webdriver.common.by import By

    run = Run(store.root / store.synth)
    churn = next(
        f.evidence["shape_churn"]
        for f in run.findings_list()
        if f.rule == "recompile" and f.evidence.get("shape_churn")
    )
    named = run.compiles[run.compiles["graph_hash"].isin(churn["graph_hashes"])].sort_values("step")
    sizes = [parse_shape(s[churn["arg"]]).dims[churn["dim"]] for s in named["input_shapes"]]
    visit(browser, server, f"/run/{store.synth}/churn", "page-churn", shots, "churn", graphs=2)
    assert plotted(browser, "churn-graph-0")[0]["y"] == sizes

    visit(
        browser,
        server,
        f"/run/{store.synth}/tensorcore",
        "page-tensorcore",
        shots,
        "tensorcore",
        graphs=1,
    )
    assert text(browser, "stat-dots") == "6"
    assert text(browser, "stat-mxu") == "31.5 %"

    events = pd.read_parquet(store.root / store.synth / "trace_events")
    visit(browser, server, f"/run/{store.synth}/trace", "page-trace", shots, "trace", graphs=2)
    assert text(browser, "stat-events") == f"{len(events):,}"
    title = browser.find_element(By.CSS_SELECTOR, "#trace-timeline .gtitle")
    # the whole trace: the longest event of each line's pixel-wide buckets, at most 2,000 (issue 30, session 11)
    shown = re.search(
        rf"the ([\d,]+) longest of {len(events):,} events in view \(the longest per pixel",
        title.text,
    )
    assert shown and 0 < int(shown[1].replace(",", "")) <= 2000, title.text
    # drawn as an image (issue 30, session 13): lanes x pixel columns, each picked event filling
    # the cells it covers (the longest one a cell's owner), its hover naming it
    (image,) = browser.execute_script(
        "const gd = document.querySelector('#trace-timeline .js-plotly-plot');"
        "return gd.data.map(t => ({type: t.type, y: t.y, text: t.text}));"
    )
    cells = [cell for row in image["text"] for cell in row if cell]
    named = {cell.split("<br>")[0] for cell in cells}
    assert image["type"] == "heatmap" and set(image["y"]) <= set(
        events["plane"].astype(str) + " / " + events["line"].astype(str)
    )
    assert 0 < len(set(cells)) <= int(shown[1].replace(",", ""))
    assert named <= set(events["name"].astype(str))
    assert_op_table_sorts(browser)
    t0 = int(events["start_ns"].min())
    lo, hi = 100.0, 101.0  # ms since trace start
    in_view = (
        (events["start_ns"] <= t0 + hi * 1e6)
        & (events["start_ns"] + events["dur_ns"] >= t0 + lo * 1e6)
    ).sum()
    polls = iter(range(10**6))

    def zoomed(d) -> bool:
        """Zoom (again every 5 s: on a loaded machine the first relayout can come before
        dcc.Graph listens), until the server's re-drawn figure is in."""
        if next(polls) % 50 == 0:
            d.execute_script(
                "Plotly.relayout(document.querySelector('#trace-timeline .js-plotly-plot'),"
                "{'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]});",
                lo,
                hi,
            )
        return (
            f"all {in_view:,} events in view"
            in d.find_element(By.CSS_SELECTOR, "#trace-timeline .gtitle").text
        )

    wait(browser, zoomed, timeout=60)
    drawn = plotted(browser, "trace-timeline")  # line segments: start, end and a gap per event
    assert sum(len(lane["x"]) for lane in drawn if lane["mode"] == "lines") == 3 * in_view


def assert_op_table_sorts(browser) -> None:
    """A click on the op table's count header sorts it by count, most first; a second, least first
    (the server sorts the cached ops: pages/trace.sorted_by). Read in one script: Dash replaces
    the table's elements while it re-renders."""
    from selenium.webdriver.common.by import By

    def table(d) -> tuple[str, list[int]]:  # type: ignore[no-untyped-def]
        head, counts = d.execute_script(
            "const t = document.getElementById('trace-ops');"
            "return [t.querySelector('th:nth-child(3)').innerText,"
            " [...t.querySelectorAll('tbody tr')].map(r => r.cells[2].innerText)];"
        )
        return head, [int(c.replace(",", "")) for c in counts]

    def sorted_as(mark: str, descending: bool):  # type: ignore[no-untyped-def]
        def check(d) -> bool:  # type: ignore[no-untyped-def]
            head, counts = table(d)
            return mark in head and counts == sorted(counts, reverse=descending)

        return check

    assert len(table(browser)[1]) > 1
    header = "#trace-ops th:nth-child(3) button"
    browser.find_element(By.CSS_SELECTOR, header).click()
    wait(browser, sorted_as("\u25be", descending=True))
    browser.find_element(By.CSS_SELECTOR, header).click()
    wait(browser, sorted_as("\u25b4", descending=False))


def test_tensorcore_and_trace_pages_of_a_real_traced_run(browser, server, store, shots):
    from tpuscope.analyze.mxu import matmuls

    run = Run(store.root / store.traced)
    visit(
        browser,
        server,
        f"/run/{store.traced}/tensorcore",
        "page-tensorcore",
        shots,
        "tensorcore-real",
        graphs=2,
    )
    assert text(browser, "stat-dots") == str(len(matmuls(run.hlo_ops)))
    busy, idle = run.device_steps["busy_ns"].sum(), run.device_steps["idle_ns"].sum()
    assert text(browser, "stat-duty") == f"{100 * busy / (busy + idle):.1f} %"
    bars = plotted(browser, "busy-idle")
    assert bars[0]["x"] == sorted(run.device_steps["step"].unique().tolist())

    visit(
        browser, server, f"/run/{store.traced}/trace", "page-trace", shots, "trace-real", graphs=2
    )
    assert text(browser, "stat-events") == f"{len(run.trace_events):,}"
    assert "xprof --logdir" in text(browser, "trace-links")


@pytest.mark.parametrize(
    ("page", "says"),
    [
        ("churn", "No shape churn"),
        ("tensorcore", "tpuscope run --deep"),
        ("trace", "tpuscope run --trace-steps"),
    ],
)
def test_pages_without_data_say_so_and_how_to_get_it(browser, server, store, shots, page, says):
    visit(browser, server, f"/run/{store.real}/{page}", f"page-{page}", shots, f"empty-{page}")
    assert says in text(browser, f"no-{page}")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/run/..%2F..%2Fetc", "not a valid run id"),
        ("/run/nope-123", "no run 'nope-123'"),
        ("/compare/a..b/x", "not a valid run id"),
    ],
)
def test_bad_run_ids_give_an_error_page(browser, server, shots, path, message):
    visit(
        browser,
        server,
        path,
        "error-message",
        shots,
        "error-" + re.sub(r"\W+", "-", path),
        missing=True,
    )
    assert message in text(browser, "error-message")
