"""Readers of the store under damage: truncated and incompatible parts, a run from a newer
tpuscope, a corrupt meta.json, a run folder copied under a new name, run-id collisions, and
imports holding numbers beyond int64. Runs are made by importing real metrics reports (no
torch): about 5 s.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import real_trace, run_tpuscope
from tpuscope.schema_consts import SCHEMA_VERSION
from tpuscope.store import RunStore, read_table

GRID = "metrics_reports/fastai_xla_extensions_XLA_run_debug_base_grid_sample_tpu_xrt.metrics_report.txt"
CAIL = "metrics_reports/cail2020_htfltpu_bert_8core_xrt.metrics_report.txt"
IMAGENET = (
    "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_user_mark_step_imagenet.pt_xla_debug.txt"
)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real import (two metrics reports), made once; each test damages its own copy."""
    store = tmp_path_factory.mktemp("made")
    proc = run_tpuscope(
        "import",
        "--store",
        str(store),
        "--name",
        "imp",
        "-q",
        str(real_trace(GRID)),
        str(real_trace(CAIL)),
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = store.iterdir()
    return run_dir


def imported(made: Path, store: Path) -> Path:
    return Path(shutil.copytree(made, store / made.name))


def show_json(store: Path, run: str, *extra: str) -> tuple[dict, str]:
    proc = run_tpuscope("show", "--store", str(store), run, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_a_truncated_part_is_skipped_by_name_and_the_rest_is_read(
    made: Path, tmp_path: Path
) -> None:
    run_dir = imported(made, tmp_path)
    parts = sorted((run_dir / "fallbacks").glob("part-*.parquet"))  # a table `show` reads
    assert len(parts) == 2
    whole = read_table(run_dir, "fallbacks").num_rows
    kept = pq.read_table(parts[1]).num_rows
    parts[0].write_bytes(parts[0].read_bytes()[: parts[0].stat().st_size // 2])
    # rewritten in place (writers rename parts in, so the folder's mtime, which dates the stored
    # analysis, does not move): --reanalyze makes `show` read the table
    _, stderr = show_json(tmp_path, run_dir.name, "--reanalyze")
    assert f"skipped the damaged part {parts[0]}" in stderr
    warnings: list[str] = []
    assert read_table(run_dir, "fallbacks", warn=warnings).num_rows == kept < whole
    assert warnings and parts[0].name in warnings[0]


def test_a_part_of_another_schema_is_skipped_by_name(made: Path, tmp_path: Path) -> None:
    run_dir = imported(made, tmp_path)
    (run_dir / "steps").mkdir()
    bad = run_dir / "steps" / "part-foreign-000001.parquet"
    pq.write_table(pa.table({"step": ["not a number"], "wall_ns": ["x"]}), bad)
    data, stderr = show_json(tmp_path, run_dir.name)
    assert f"skipped the damaged part {bad}" in stderr
    assert data["summary"]["run_id"] == run_dir.name


def test_the_dashboard_still_lists_a_run_with_a_damaged_part(made: Path, tmp_path: Path) -> None:
    pytest.importorskip("dash")
    from tpuscope.dashboards.data import StoreData

    run_dir = imported(made, tmp_path)
    for part in (run_dir / "fallbacks").glob("part-*.parquet"):
        part.write_bytes(b"PAR1 not really")
    (row,) = StoreData(tmp_path).run_rows()
    assert row["run_id"] == run_dir.name and not str(row["ended"]).startswith("unreadable")


def test_a_run_from_a_newer_tpuscope_is_refused_clearly(made: Path, tmp_path: Path) -> None:
    run_dir = imported(made, tmp_path)
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({**meta, "schema_version": 99}))
    proc = run_tpuscope("show", "--store", str(tmp_path), run_dir.name)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"tpuscope: run {run_dir.name} has schema version 99, newer than this "
        f"tpuscope reads ({SCHEMA_VERSION}): upgrade tpuscope to read it"
    )
    listing = run_tpuscope("ls", "--store", str(tmp_path), "--json")
    assert json.loads(listing.stdout) == [] and "schema version 99" in listing.stderr


def test_a_corrupt_meta_json_is_named_not_read_as_empty(made: Path, tmp_path: Path) -> None:
    run_dir = imported(made, tmp_path)
    (run_dir / "meta.json").write_text('{"run_id": "x", "status": ')
    proc = run_tpuscope("show", "--store", str(tmp_path), run_dir.name)
    assert proc.returncode == 2 and f"{run_dir / 'meta.json'} is not valid JSON" in proc.stderr
    listing = run_tpuscope("ls", "--store", str(tmp_path), "--json")
    assert json.loads(listing.stdout) == [] and "is not valid JSON" in listing.stderr


def test_a_renamed_run_is_found_by_its_folder(made: Path, tmp_path: Path) -> None:
    run_dir = imported(made, tmp_path)
    moved = tmp_path / "renamed-run"
    shutil.copytree(run_dir, moved)
    shutil.rmtree(run_dir)
    data, _ = show_json(tmp_path, "latest")
    assert data["summary"]["run_id"] == "renamed-run"
    listing = run_tpuscope("ls", "--store", str(tmp_path), "--json")
    assert [m["run_id"] for m in json.loads(listing.stdout)] == ["renamed-run"]


def test_a_run_id_collision_draws_a_new_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr("tpuscope.store.runstore.secrets.token_hex", lambda n: next(drawn))
    monkeypatch.setattr("tpuscope.store.runstore.time.strftime", lambda fmt: "20261201-000000")
    store = RunStore(tmp_path)
    first, second = store.new_run("same"), store.new_run("same")
    assert (first.name, second.name) == ("same-20261201-000000-aaaa", "same-20261201-000000-bbbb")


def test_a_number_beyond_int64_refuses_that_file_only(tmp_path: Path) -> None:
    text = real_trace(GRID).read_text()
    huge = tmp_path / "huge.metrics.txt"
    huge.write_text(text.replace("Value: 10", "Value: 99999999999999999999", 1))
    assert "99999999999999999999" in huge.read_text()
    proc = run_tpuscope(
        "import", "--store", str(tmp_path / "s"), "-q", str(huge), str(real_trace(IMAGENET))
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"cannot import {huge}:" in proc.stderr and "out of range (beyond int64)" in proc.stderr
    (run_dir,) = (tmp_path / "s").iterdir()  # one run, from the good file
    assert len(read_table(run_dir, "compiles")) == 1
    assert not list(run_dir.rglob("*.tmp"))


def test_text_logs_inside_an_imported_folder_are_read_or_named(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "worker-0"
    logs.mkdir(parents=True)
    shutil.copy(real_trace(GRID), logs / "metrics.txt")
    shutil.copy(real_trace(IMAGENET), logs / "debug.log")
    (logs / "README.txt").write_text("notes about this job\n")
    proc = run_tpuscope(
        "import", "--store", str(tmp_path / "s"), "-q", "--json", str(tmp_path / "logs")
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "skipped 1 file(s) of no format tpuscope reads in the folder(s) given: README.txt"
        in proc.stderr
    )
    data = json.loads(proc.stdout)
    assert sorted(Path(i["path"]).name for i in data["imported"]) == ["debug.log", "metrics.txt"]
    run_dir = Path(data["run_dir"])
    assert len(read_table(run_dir, "compiles")) == 1 and len(read_table(run_dir, "fallbacks")) >= 3
