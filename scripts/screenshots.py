"""The README's and docs/dashboard.md's screenshots, made from current runs (issue 29).

    PYTHONPATH=. python3 scripts/screenshots.py [--store DIR] [--out docs/screenshots]

Runs the bundled examples under `tpuscope run` into a fresh store (variable_length, the same
with `--buckets 48,64`, host_sync_fallback, transformer_head_dim64 with `--deep
--trace-steps 2:4`), serves the dashboard over it on a loopback port and takes a full-page
screenshot of each page in the headless Chromium the browser tests use
(tests/dashboard_browser.py: the same checks of the console and of requests leaving the
machine run on every page). With `--store` an existing store with runs of those names is
used as it is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS: dict[
    str, tuple[str, ...]
] = {  # name -> (tpuscope options..., "--", example and its arguments)
    "variable_length": ("--", "variable_length.py"),
    "variable_length_bucketed": ("--", "variable_length.py", "--buckets", "48,64"),
    "host_sync_fallback": ("--", "host_sync_fallback.py"),
    "transformer_head_dim64": (
        "--deep",
        "--trace-steps",
        "2:4",
        "--",
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
    ),
}


def make_runs(store: Path) -> None:
    """One `tpuscope run` of each example, named as the pages below look them up."""
    for name, spec in RUNS.items():
        cut = spec.index("--")
        options, (example, *args) = spec[:cut], spec[cut + 1 :]
        command = [
            sys.executable,
            "-m",
            "tpuscope",
            "run",
            "--store",
            str(store),
            "--name",
            name,
            "--quiet",
            *options,
            "python",
            f"examples/{example}",
            *args,
        ]  # as a user types it
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        print(f"ran {name}", file=sys.stderr)


def pages(ids: dict[str, str]) -> list[tuple[str, str, str, int]]:
    """(file name, URL path, the page's element id, graphs to wait for) of every screenshot."""
    varlen, fallbacks, deep = (
        ids["variable_length"],
        ids["host_sync_fallback"],
        ids["transformer_head_dim64"],
    )
    return [
        ("runs", "/", "page-runs", 0),
        ("overview", f"/run/{varlen}", "page-overview", 1),
        ("recompiles", f"/run/{varlen}/recompiles", "page-recompiles", 1),
        ("churn", f"/run/{varlen}/churn", "page-churn", 1),
        ("fallbacks", f"/run/{fallbacks}/fallbacks", "page-fallbacks", 1),
        ("compare", f"/compare/{varlen}/{ids['variable_length_bucketed']}", "page-compare", 3),
        ("tensorcore", f"/run/{deep}/tensorcore", "page-tensorcore", 2),
        ("trace", f"/run/{deep}/trace", "page-trace", 2),
    ]


def screenshots(store: Path, out: Path) -> None:
    """Full-page screenshots of the store's pages into `out`, through the browser tests' `visit`."""
    from werkzeug.serving import make_server

    from tests.dashboard_browser import new_driver, visit
    from tpuscope.dashboards import create_app

    app = create_app(store)
    data = app.tpuscope_data
    ids = {data.meta(r).get("name"): r for r in sorted(data.run_ids())}
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    driver = new_driver(Path(tempfile.mkdtemp()))
    os.environ["TPUSCOPE_SCREENSHOTS"] = str(out)  # visit() then saves a full-page copy there
    try:
        for name, path, page, graphs in pages(ids):
            visit(
                driver,
                f"http://127.0.0.1:{srv.server_port}",
                path,
                page,
                Path(tempfile.mkdtemp()),
                name,
                graphs,
            )
            print(out / f"{name}.png")
    finally:
        driver.quit()
        srv.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store", type=Path, help="a store that already holds the runs (default: make them)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    store = args.store
    if store is None:
        store = Path(tempfile.mkdtemp(prefix="tpuscope-screenshots-"))
        make_runs(store)
    screenshots(store, args.out)


if __name__ == "__main__":
    main()
