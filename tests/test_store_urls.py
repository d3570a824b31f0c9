"""Store roots given as a plain path, a file:// URL, or a URL of no known filesystem (a
one-line error, never a local folder named after the scheme)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_tpuscope
from tpuscope.store import PartWriter, RunStore, load_run


def a_run(root: Path) -> str:
    run_dir = RunStore(root).new_run("urls", status="finished", start_ns=1)
    writer = PartWriter(run_dir, tag="h-1")
    writer.extend(
        "steps",
        [{"host": "h", "pid": 1, "rank": 0, "step": i, "wall_ns": 10 + i} for i in range(4)],
    )
    writer.flush()
    return run_dir.name


def test_a_path_and_a_file_url_name_the_same_store(tmp_path: Path) -> None:
    run_id = a_run(tmp_path / "runs")
    for store in (str(tmp_path / "runs"), f"file://{tmp_path / 'runs'}"):
        proc = run_tpuscope("ls", "--store", store, "--json")
        assert proc.returncode == 0, proc.stderr
        assert [r["run_id"] for r in json.loads(proc.stdout)] == [run_id]
        proc = run_tpuscope(
            "query", "--store", store, run_id, "SELECT sum(wall_ns) AS s FROM steps", "--csv"
        )
        assert proc.stdout.splitlines() == ['"s"', str(sum(10 + i for i in range(4)))]
    assert len(load_run(run_id, store=f"file://{tmp_path / 'runs'}").steps) == 4


def test_a_url_of_no_known_filesystem_is_one_line_and_makes_no_folder(tmp_path: Path) -> None:
    for command in (("ls",), ("show", "latest"), ("query", "latest", "SELECT 1")):
        proc = run_tpuscope(*command, "--store", "nosuchfs://bucket/runs", cwd=tmp_path)
        assert proc.returncode == 2
        assert (
            proc.stderr.count("\n") == 1
            and proc.stderr.startswith("tpuscope: ")
            and "nosuchfs://" in proc.stderr
        )
    assert list(tmp_path.iterdir()) == []


def test_tpuscope_compact_merges_a_run_and_keeps_its_rows(tmp_path: Path) -> None:
    run_id = a_run(tmp_path / "runs")
    writer = PartWriter(tmp_path / "runs" / run_id, tag="h-2")
    writer.extend("steps", [{"host": "h", "pid": 2, "rank": 1, "step": 0, "wall_ns": 5}])
    writer.flush()
    proc = run_tpuscope("compact", "--store", str(tmp_path / "runs"), run_id)
    assert proc.returncode == 0 and "merged 2 part file(s)" in proc.stderr, proc.stderr
    (only,) = (tmp_path / "runs" / run_id / "steps").iterdir()
    assert "-compact-" in only.name
    assert sorted(load_run(run_id, store=tmp_path / "runs").steps["wall_ns"]) == [5, 10, 11, 12, 13]


def test_the_dashboard_data_layer_reads_a_run_in_an_object_store(gcs_store, tmp_path: Path) -> None:
    pytest.importorskip("dash")
    from tpuscope.dashboards.data import StoreData

    run_id = a_run(tmp_path / "runs")
    fs = gcs_store.filesystem()
    fs.put(
        str(tmp_path / "runs" / run_id),
        f"{gcs_store.bucket}/dash-{tmp_path.name}/{run_id}",
        recursive=True,
    )
    data = StoreData(gcs_store.url(f"dash-{tmp_path.name}"))
    assert data.run_ids() == [run_id]
    assert list(data.table(run_id, "steps")["wall_ns"]) == [10, 11, 12, 13]
    assert list(data.columns(run_id, "steps", ["step"]).columns) == ["step"]
    (row,) = data.run_rows()
    assert row["run_id"] == run_id and row["steps"] == 4


def test_import_into_an_object_store(gcs_store, tmp_path: Path) -> None:
    from tests.conftest import real_trace

    report = real_trace("metrics_reports/cail2020_htfltpu_bert_8core_xrt.metrics_report.txt")
    url = gcs_store.url(f"import-{tmp_path.name}")
    env = {**gcs_store.env, "TPUSCOPE_STAGE": str(tmp_path / "stage")}
    proc = run_tpuscope("import", "--store", url, "--name", "imp", "-q", str(report), env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"as {url}/imp-" in proc.stderr and not any((tmp_path / "stage").iterdir())
    listed = json.loads(run_tpuscope("ls", "--store", url, "--json", env=env).stdout)
    assert [r["status"] for r in listed] == ["imported"]
    counted = run_tpuscope(
        "query",
        "--store",
        url,
        listed[0]["run_id"],
        "SELECT count(*) AS n FROM metrics",
        "--json",
        env=env,
    )
    assert json.loads(counted.stdout)[0]["n"] > 0
