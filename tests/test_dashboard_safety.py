"""The dashboard as `tpuscope dashboard` serves it (serve.make_server, real werkzeug) against
hostile input: a foreign Host header (DNS rebinding), a run name written in Markdown/HTML that
would fetch a URL, a malformed run id sent to a callback. The name check runs in Debian's
headless Chromium. About 10 s.
"""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import threading
from pathlib import Path

import pytest

from tests.conftest import real_trace, run_tpuscope

pytest.importorskip("dash")
GRID = "metrics_reports/fastai_xla_extensions_XLA_run_debug_base_grid_sample_tpu_xrt.metrics_report.txt"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


class Beacon:
    """A local HTTP server that counts the requests it gets: a fetched image would land here."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        beacon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                beacon.hits.append(self.path)
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def beacon():  # type: ignore[no-untyped-def]
    b = Beacon()
    yield b
    b.server.shutdown()


@pytest.fixture(scope="module")
def hostile_store(
    tmp_path_factory: pytest.TempPathFactory, beacon: Beacon
) -> tuple[Path, str, str]:
    store = tmp_path_factory.mktemp("hostile")
    name = f"![t](http://127.0.0.1:{beacon.port}/x.png) <img src=http://127.0.0.1:{beacon.port}/y.png> **b**"
    proc = run_tpuscope(
        "import", "--store", str(store), "--name", name, "-q", str(real_trace(GRID))
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = store.iterdir()
    return store, run_dir.name, name


@pytest.fixture(scope="module")
def served(hostile_store):  # type: ignore[no-untyped-def]
    from tpuscope.dashboards.serve import make_server

    server = make_server(hostile_store[0], "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


def request(
    port: int, path: str, host: str, method: str = "GET", body: dict | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = json.dumps(body).encode() if body is not None else None
    headers = {"Host": host, **({"Content-Type": "application/json"} if payload else {})}
    conn.request(method, path, body=payload, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def test_requests_for_another_host_are_refused(served: int) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: its Host header gives it away."""
    assert request(served, "/", f"127.0.0.1:{served}")[0] == 200
    assert request(served, "/", f"localhost:{served}")[0] == 200
    for host in (f"evil.example:{served}", "evil.example", f"127.0.0.1.evil.example:{served}"):
        status, body = request(served, "/_dash-layout", host)
        assert status == 403 and b"runs" not in body, host


def test_an_app_made_with_create_app_answers_only_to_loopback_names(hostile_store) -> None:
    """`create_app(store).run()` (the documented Python way) is guarded too, at any port."""
    from tpuscope.dashboards import create_app

    client = create_app(hostile_store[0]).server.test_client()
    for host, status in (
        ("127.0.0.1:8050", 200),
        ("localhost:9999", 200),
        ("[::1]:8050", 200),
        ("evil.example:8050", 403),
        ("localhost.evil.example", 403),
    ):
        assert client.get("/", headers={"Host": host}).status_code == status, host


def test_host_check_is_off_only_when_the_network_was_asked_for() -> None:
    from tpuscope.dashboards.serve import allowed_hosts

    assert allowed_hosts("0.0.0.0", 8050) is None
    assert allowed_hosts("127.0.0.1", 8050) == {"127.0.0.1:8050", "localhost:8050", "[::1]:8050"}


def test_a_bad_run_id_in_a_callback_is_a_404_with_one_log_line(served: int, caplog) -> None:  # type: ignore[no-untyped-def]
    body = {
        "output": "step-timeline.figure",
        "outputs": {"id": "step-timeline", "property": "figure"},
        "inputs": [
            {
                "id": "step-timeline",
                "property": "relayoutData",
                "value": {"xaxis.range[0]": 0, "xaxis.range[1]": 1},
            }
        ],
        "state": [{"id": "overview-run", "property": "data", "value": "../../etc/passwd"}],
        "changedPropIds": ["step-timeline.relayoutData"],
    }
    with caplog.at_level(logging.INFO):
        status, text = request(
            served, "/_dash-update-component", f"127.0.0.1:{served}", "POST", body
        )
    assert status == 404 and b"not a valid run id" in text
    lines = [
        r
        for r in caplog.records
        if r.name.startswith(("tpuscope", "werkzeug", "tpuscope.dashboards"))
        and r.levelno >= logging.WARNING
    ]
    assert len(lines) == 1 and "not a valid run id" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver in /usr/bin",
)
def test_a_markdown_run_name_is_shown_as_text_and_fetches_nothing(
    served: int, hostile_store, beacon, tmp_path: Path
) -> None:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, run_id, name = hostile_store
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(f"http://127.0.0.1:{served}/")
        selector = f'div.ag-row[row-id="{run_id}"] div[col-id="name"]'
        cell = WebDriverWait(driver, 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, selector)
        )[0]
        WebDriverWait(driver, 10).until(lambda d: cell.text)
        assert cell.text == name
        assert not cell.find_elements(By.TAG_NAME, "img") and not cell.find_elements(
            By.TAG_NAME, "strong"
        )
        link = driver.find_element(
            By.CSS_SELECTOR, f'div.ag-row[row-id="{run_id}"] div[col-id="link"] a'
        )
        assert link.text == run_id  # the link is the run's id, whole (names repeat)
        assert link.get_attribute("href") == f"http://127.0.0.1:{served}/run/{run_id}"
        assert not beacon.hits
    finally:
        driver.quit()
