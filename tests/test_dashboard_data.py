"""The dashboard's reading and routing without a browser: the store reader (id validation,
caching, summaries), the URL router and download route, the pages' own tables."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest

from tests.conftest import ROOT
from tests.synthetic import make_run
from tpuscope.dashboards.data import RunNotFound, StoreData, runs_row
from tpuscope.schema import TABLES
from tpuscope.store.parts import write_table_atomic


@pytest.fixture()
def small_store(tmp_path):
    run_dir = make_run(tmp_path, "syn", steps=50, trace_events=500, recompiles=3)
    return tmp_path, run_dir


@pytest.mark.parametrize(
    "bad", ["..", "../etc", "a/b", "%2e%2e", "", "x" * 300, None, 5, "/etc/passwd"]
)
def test_run_ids_from_urls_are_validated(small_store, bad):
    data = StoreData(small_store[0])
    with pytest.raises(RunNotFound):
        data.run_dir(bad)


def test_tables_are_cached_until_a_writer_adds_a_part(small_store):
    root, run_dir = small_store
    data = StoreData(root)
    steps = data.table(run_dir.name, "steps")
    assert data.table(run_dir.name, "steps") is steps  # cached
    extra = pa.Table.from_pylist([{**steps.iloc[-1].to_dict(), "step": 50}], schema=TABLES["steps"])
    write_table_atomic(run_dir / "steps" / "part-later-000001.parquet", extra)
    assert len(data.table(run_dir.name, "steps")) == 51
    assert data.summary(run_dir.name)["steps"] == 51


def test_summary_and_runs_row_match_the_tables(small_store):
    root, run_dir = small_store
    data = StoreData(root)
    summary = data.summary(run_dir.name)
    fallbacks = data.table(run_dir.name, "fallbacks")
    cpu = fallbacks[fallbacks["op"] != "aten::_local_scalar_dense"]  # value reads are host syncs
    assert summary["fallback_count"] == int(cpu["count"].sum()) > 0
    row = runs_row(summary)
    findings = data.table(run_dir.name, "findings")
    assert row["steps"] == 50 and row["fallbacks"] == summary["fallback_count"]
    for sev in ("high", "medium", "low"):
        assert row[sev] == int((findings["severity"] == sev).sum())
    assert runs_row(data.brief(run_dir.name)) == row  # the Runs page's light path agrees
    from tpuscope.analyze.families import graph_families

    families = graph_families(data.table(run_dir.name, "compiles"))
    assert row["recompiles"] == int(families["recompile"].sum()) == summary["recompiles"]


def test_router_pages_and_error_pages(small_store):
    from tpuscope.dashboards.app import route

    root, run_dir = small_store
    data = StoreData(root)
    rid = run_dir.name
    pages = ["recompiles", "fallbacks", "churn", "tensorcore", "trace"]
    for path, page in [
        ("/", "page-runs"),
        (f"/run/{rid}", "page-overview"),
        (f"/compare/{rid}/{rid}", "page-compare"),
        *[(f"/run/{rid}/{p}", f"page-{p}") for p in pages],
    ]:
        assert route(data, path).id == page, path
    assert "not a valid run id" in str(route(data, "/run/..%2F..%2Fetc").to_plotly_json())
    assert "no run 'nope'" in str(route(data, "/run/nope").to_plotly_json())
    assert "no page at /run/x/y/z" in str(route(data, "/run/x/y/z").to_plotly_json())


def test_download_route_serves_only_listed_trace_files(small_store):
    from tpuscope.dashboards.app import create_app

    root, run_dir = small_store
    (run_dir / "trace").mkdir()
    (run_dir / "trace" / "host.xplane.pb").write_bytes(b"xplane")
    (root / "secret.xplane.pb").write_bytes(b"secret")
    client = create_app(root).server.test_client()
    assert client.get(f"/download/{run_dir.name}/trace/host.xplane.pb").data == b"xplane"
    for url in [
        f"/download/{run_dir.name}/meta.json",
        f"/download/{run_dir.name}/../secret.xplane.pb",
        f"/download/{run_dir.name}/..%2Fsecret.xplane.pb",
        "/download/..%2F/secret.xplane.pb",
        f"/download/{run_dir.name}//etc/passwd",
    ]:
        resp = client.get(url)  # a 404, or Dash's catch-all page: never the file
        assert resp.status_code == 404 or b"react-entry-point" in resp.data, url
        assert b"secret" not in resp.data and b"run_id" not in resp.data, url


def test_trace_links_and_downloads_of_a_store_reached_through_a_symlink(small_store, tmp_path):
    """Session 16: the listing held resolved paths, which are not under the symlinked store's
    run folder, so the Trace page's links raised ValueError and the download route 404'd."""
    from tpuscope.dashboards.app import create_app
    from tpuscope.dashboards.pages.trace import links

    root, run_dir = small_store
    (run_dir / "trace").mkdir(exist_ok=True)
    (run_dir / "trace" / "host.xplane.pb").write_bytes(b"xplane")
    linked = tmp_path / "linked-store"
    linked.symlink_to(root, target_is_directory=True)
    shown = str(links(StoreData(linked), run_dir.name).to_plotly_json())
    assert f"/download/{run_dir.name}/trace/host.xplane.pb" in shown
    client = create_app(linked).server.test_client()
    assert client.get(f"/download/{run_dir.name}/trace/host.xplane.pb").data == b"xplane"


def test_importing_the_dashboard_loads_nothing_and_never_a_collector(tmp_path):
    code = (
        "import sys, tpuscope.dashboards; assert 'dash' not in sys.modules, 'dash at import';"
        "from tpuscope.dashboards import create_app; create_app(sys.argv[1]);"
        "bad = [m for m in sys.modules if m.startswith(('tpuscope.collect', 'torch', 'jax'))];"
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_data_is_the_only_module_of_the_dashboard_that_reads_the_store(tmp_path):
    """dashboards/data.py's docstring holds: no other module imports tpuscope.store (the
    pages, the series, the trace view, Compare and `tpuscope dashboard` go through StoreData),
    and the synthetic runs of the tests are not in the package."""
    from tests.test_layers import _imports, _modules
    from tpuscope.dashboards.serve import ServeError, make_server

    around = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for name, path in _modules().items()
        if name.startswith("tpuscope.dashboards.") and name != "tpuscope.dashboards.data"
        for target, line in _imports(name, path)
        if target.split(".")[:2] == ["tpuscope", "store"]
    ]
    assert not around, around
    assert not (ROOT / "tpuscope" / "dashboards" / "synthetic.py").exists()

    with pytest.raises(ServeError, match="^no run store at "):
        make_server(tmp_path / "missing", "127.0.0.1", 0)
    (tmp_path / "file").write_text("")
    with pytest.raises(ServeError, match="is not a folder$"):
        make_server(tmp_path / "file", "127.0.0.1", 0)
    assert StoreData(tmp_path).sweep_records() == []


def test_host_sync_sites_and_jax_retraces_tables():
    from tpuscope.dashboards.pages.fallbacks import sync_sites
    from tpuscope.dashboards.pages.recompiles import retrace_rows

    sites = pd.DataFrame(
        {
            "step": [2, 3, 3],
            "kind": "host_sync",
            "name": "item",
            "location": ["train.py:70", "train.py:70", None],
            "count": [1, 1, 2],
        }
    )
    table = sync_sites(sites)
    assert table[table["location"] == "train.py:70"].to_dict("records")[0] == {
        "kind": "host_sync",
        "name": "item",
        "location": "train.py:70",
        "count": 2,
        "steps": 2,
        "per_step": 1.0,
        "site": "train.py:70",
    }
    retraces = pd.DataFrame(
        {
            "step": [4],
            "function": ["loss_fn"],
            "kind": ["input_types"],
            "arg": ["x"],
            "before": ["f32[32,64]"],
            "after": ["f32[8,64]"],
            "detail": [""],
            "location": [None],
            "defined_at": ["train.py:20"],
        }
    )
    row = retrace_rows(retraces).to_dict("records")[0]
    assert row["change"] == "f32[32,64] -> f32[8,64]" and row["location"] == "train.py:20"


def test_xprof_op_profile_rows_are_the_ops_with_most_self_time():
    from tpuscope.dashboards.pages.tensorcore import xprof_rows

    ops = pd.DataFrame(
        {
            "hlo_op": ["fusion.1", "dot.2", "copy.3"],
            "category": ["loop fusion", "convolution", "copy"],
            "self_time_us": [5.0, 40.0, 1.0],
            "self_time_percent": [10.9, 87.0, 2.1],
            "flops_utilization": [0.0, 0.61, 0.0],
            "bound_by": ["HBM", "Compute", "HBM"],
            "source_info": [None, "model.py:81", None],
        }
    )
    rows = xprof_rows(ops, n=2)
    assert (
        rows["hlo_op"].tolist() == ["dot.2", "fusion.1"]
        and rows.iloc[0]["flops_utilization"] == 0.61
    )


def test_compare_page_shows_the_diff_modules_interval_and_findings(tmp_path):
    from tpuscope.analyze.compare import compare
    from tpuscope.dashboards.pages.compare import layout
    from tpuscope.report.diff import ratio_text, side_of
    from tpuscope.store import Run

    a = make_run(tmp_path, "a", steps=40, trace_events=10, recompiles=6, seed=1, device=False)
    b = make_run(tmp_path, "b", steps=60, trace_events=10, recompiles=0, seed=2, device=False)
    page = str(layout(StoreData(tmp_path), a.name, b.name).to_plotly_json())
    diff = compare(side_of(Run(a)), side_of(Run(b)))
    assert ratio_text(diff["step_time"]) in page and "% CI x" in page
    for kind, ident in (("new", "New in B"), ("gone", "Gone in B"), ("changed", "Changed")):
        assert f"{ident} ({len(diff['findings'][kind])})" in page
