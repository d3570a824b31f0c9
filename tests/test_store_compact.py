"""Merging a table's parts when a run ends: the same rows before and after, locally and in a
real GCS API server, and a merge killed between writing the merged file and removing the
parts it holds never shows a row twice nor loses one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.object_stores import ObjectStore
from tpuscope.store import PartWriter, Run, RunStore
from tpuscope.store.compact import active_parts, compact_table
from tpuscope.store.location import Location


def written_run(root: Path) -> Path:
    """A run whose steps come from two processes' writers, flushed three times each."""
    run_dir = RunStore(root).new_run("compact")
    for pid in (101, 102):
        writer = PartWriter(run_dir, tag=f"host-a-{pid}")
        for flush in range(3):
            writer.extend(
                "steps",
                [
                    {
                        "host": "host-a",
                        "pid": pid,
                        "rank": pid - 101,
                        "step": flush * 10 + i,
                        "wall_ns": 1000 * pid + i,
                        "boundary": "sync",
                    }
                    for i in range(10)
                ],
            )
            writer.flush()
    return run_dir


def rows(run: Location | Path) -> list[tuple]:
    table = (
        Run(run)
        .arrow("steps", columns=["pid", "step", "wall_ns"])
        .sort_by([("pid", "ascending"), ("step", "ascending")])
    )
    return list(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def test_compaction_leaves_the_same_rows_in_one_file(tmp_path: Path) -> None:
    run_dir = written_run(tmp_path)
    before = rows(run_dir)
    assert len(before) == 60 and len(list((run_dir / "steps").glob("part-*"))) == 6
    assert Run(run_dir).compact("host-a-1") == 6
    (only,) = (run_dir / "steps").glob("part-*")
    assert "-compact-" in only.name
    assert rows(run_dir) == before
    assert Run(run_dir).compact("host-a-1") == 0  # nothing left to merge


def test_a_merge_killed_before_removing_its_parts_never_shows_a_row_twice(tmp_path: Path) -> None:
    run_dir = written_run(tmp_path)
    before = rows(run_dir)
    kept = tmp_path / "kept"
    shutil.copytree(run_dir / "steps", kept)
    Run(run_dir).compact("host-a-1")
    for part in kept.iterdir():  # the parts back, as if the merge died right after its write
        shutil.copy(part, run_dir / "steps" / part.name)
    assert len(list((run_dir / "steps").glob("part-*"))) == 7
    assert len(active_parts(Location.of(run_dir / "steps"))) == 1
    assert rows(run_dir) == before
    # a later part (written after the merge) is read beside it; merging again takes both
    writer = PartWriter(run_dir, tag="host-a-103")
    writer.extend(
        "steps",
        [{"host": "host-a", "pid": 103, "rank": 2, "step": 0, "wall_ns": 7, "boundary": "sync"}],
    )
    writer.flush()
    assert len(rows(run_dir)) == 61
    # 6 stale parts, the merged one, the new one
    assert compact_table(Location.of(run_dir / "steps"), "host-a-1") == 8
    (only,) = (run_dir / "steps").glob("part-*")
    assert rows(run_dir) == sorted([*before, (103, 0, 7)])


def test_compaction_in_an_object_store_leaves_the_same_rows(
    gcs_store: ObjectStore, tmp_path: Path
) -> None:
    run_dir = written_run(tmp_path)
    before = rows(run_dir)
    fs = gcs_store.filesystem()
    remote = f"{gcs_store.bucket}/compact-{tmp_path.name}/{run_dir.name}"
    fs.put(str(run_dir), remote, recursive=True)
    loc = Location.of(f"gs://{remote}")
    assert len((loc / "steps").entries()) == 6
    assert rows(loc) == before
    assert Run(loc).compact("host-a-1") == 6
    (only,) = (loc / "steps").entries()
    assert "-compact-" in only.name
    assert rows(loc) == before
    assert Run(loc).query("SELECT count(*) AS n FROM steps").column("n").to_pylist() == [60]


def test_a_damaged_part_is_left_as_it_is_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = written_run(tmp_path)
    first = sorted((run_dir / "steps").glob("part-*"))[0]
    first.write_bytes(first.read_bytes()[:40])
    whole = rows(run_dir)  # the damaged part skipped, the others read
    capsys.readouterr()
    Run(run_dir).compact("host-a-1")
    assert first.exists() and f"left the damaged part {first}" in capsys.readouterr().err
    assert len(whole) == 50 and rows(run_dir) == whole


def two_host_run(root: Path) -> Path:
    """A pod-like run: host-a's two processes and host-b's one, three flushes each."""
    run_dir = written_run(root)
    writer = PartWriter(run_dir, tag="host-b-201")
    for flush in range(3):
        writer.extend(
            "steps",
            [
                {
                    "host": "host-b",
                    "pid": 201,
                    "rank": 9,
                    "step": flush,
                    "wall_ns": 5,
                    "boundary": "sync",
                }
            ],
        )
        writer.flush()
    return run_dir


def test_a_host_merges_only_its_own_parts(tmp_path: Path) -> None:
    run_dir = two_host_run(tmp_path)
    before = rows(run_dir)
    assert Run(run_dir).compact("host-a-7", host="host-a") == 6
    names = sorted(p.name for p in (run_dir / "steps").glob("part-*"))
    assert [n for n in names if n.startswith("part-host-a-")] == [
        "part-host-a-7-compact-000001.parquet"
    ]
    assert len([n for n in names if n.startswith("part-host-b-201-0")]) == 3  # untouched
    assert rows(run_dir) == before


def test_a_merge_by_hand_leaves_one_part_per_host(tmp_path: Path) -> None:
    """`tpuscope compact` of a pod: each merged part holds one host's rows and names it."""
    run_dir = two_host_run(tmp_path)
    before = rows(run_dir)
    assert Run(run_dir).compact("laptop-55") == 9
    assert sorted(p.name for p in (run_dir / "steps").glob("part-*")) == [
        "part-host-a-55-compact-000001.parquet",
        "part-host-b-55-compact-000001.parquet",
    ]
    assert rows(run_dir) == before


def test_one_hosts_killed_merge_beside_another_hosts_parts_counts_each_row_once(
    tmp_path: Path,
) -> None:
    run_dir = two_host_run(tmp_path)
    before = rows(run_dir)
    kept = tmp_path / "kept"
    kept.mkdir()
    for part in (run_dir / "steps").glob("part-host-a-*"):
        shutil.copy(part, kept / part.name)
    Run(run_dir).compact("host-a-7", host="host-a")
    for part in kept.iterdir():  # host-a's merge died after its write; host-b still appends
        shutil.copy(part, run_dir / "steps" / part.name)
    active = {e.name for e in active_parts(Location.of(run_dir / "steps"))}
    assert "part-host-a-7-compact-000001.parquet" in active
    assert not [n for n in active if n.startswith("part-host-a-") and "-compact-" not in n]
    assert rows(run_dir) == before
    assert Run(run_dir).query("SELECT count(*) AS n FROM steps").column("n").to_pylist() == [63]
