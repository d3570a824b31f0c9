"""The DuckDB query docs/store.md shows, run as written over a store made by tpuscope's own
writer (two runs, one merged as a finished run is, one still in parts): it must give each
run's and host's step count and median step time as pyarrow computes them."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import duckdb
import pytest

from tpuscope.store import PartWriter, Run, RunStore

DOC = Path(__file__).resolve().parent.parent / "docs" / "store.md"


def doc_query() -> str:
    text = DOC.read_text()
    block = re.search(
        r"DuckDB \(tested by `tests/test_store_docs.py`.*?```sql\n(.*?)```", text, re.S
    )
    assert block, "docs/store.md lost its tested DuckDB query"
    return block.group(1)


def make_store(root: Path) -> dict[tuple[str, str], list[int]]:
    walls: dict[tuple[str, str], list[int]] = {}
    for r, name in enumerate(("merged", "parts")):
        run_dir = RunStore(root).new_run(name)
        for h, host in enumerate(("host-0", "host-1")):
            writer = PartWriter(run_dir, tag=f"{host}-1")
            for flush in range(3):
                rows = [
                    {
                        "host": host,
                        "pid": 1,
                        "rank": h,
                        "step": flush * 5 + i,
                        "wall_ns": 1_000_000 * (1 + r + h) + 1000 * (flush * 5 + i),
                        "boundary": "sync",
                    }
                    for i in range(5)
                ]
                walls.setdefault((run_dir.name, host), []).extend(row["wall_ns"] for row in rows)
                writer.extend("steps", rows)
                writer.flush()
        if name == "merged":
            Run(run_dir).compact("host-0-1")
    return walls


def test_the_documented_duckdb_query_gives_what_the_writer_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walls = make_store(tmp_path / "tpuscope-runs")
    monkeypatch.chdir(tmp_path)
    got = duckdb.sql(doc_query()).fetchall()
    assert {(run, host): (n, p50) for run, host, n, p50 in got} == {
        key: (len(values), statistics.median(values) / 1e6) for key, values in walls.items()
    }
    assert [row[3] for row in got] == sorted(
        (row[3] for row in got), reverse=True
    )  # ORDER BY p50_ms DESC
