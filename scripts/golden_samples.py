"""Keep the golden runs of `sample_traces/` readable on any machine (issue 29).

A run records the absolute paths of the machine that captured it (`/work/main/examples/x.py`),
so a clone elsewhere would show someone else's folders. This script rewrites the capture
folder (the run's `meta.json` `cwd`) out of every recorded string: every table part, the
debug logs and process files, so locations read `examples/x.py:23`, relative to the project
root like the examples' own paths. The folder it was captured in stays stated in
`meta.json` (`paths_relative_to`). Then it stores a fresh analysis (`tpuscope show RUN
--reanalyze`), so `tpuscope show` on a fresh clone reads the samples as stored and writes
nothing.

Run it after a change that bumps `ANALYSIS_VERSION` (tpuscope/detect/run_analysis.py):

    PYTHONPATH=. python3 scripts/golden_samples.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
TEXT_SUFFIXES = (".txt", ".json", ".log")


def _strip(value: Any, prefix: str) -> Any:
    """`value` with the capture folder cut out of every string in it (lists and dicts too)."""
    if isinstance(value, str):
        return value.replace(prefix, "")
    if isinstance(value, list):
        return [_strip(v, prefix) for v in value]
    if isinstance(value, dict):
        return {k: _strip(v, prefix) for k, v in value.items()}
    return value


def _rewrite_part(path: Path, prefix: str) -> bool:
    """Rewrite one Parquet part in place, same schema; True when a string changed."""
    table = pq.read_table(path)
    rows = table.to_pylist()
    stripped = _strip(rows, prefix)
    if stripped == rows:
        return False
    pq.write_table(pa.Table.from_pylist(stripped, schema=table.schema), path, compression="snappy")
    return True


def _rewrite_text(path: Path, prefix: str) -> bool:
    text = path.read_text(errors="surrogateescape")
    if prefix not in text:
        return False
    path.write_text(text.replace(prefix, ""), errors="surrogateescape")
    return True


def relativize(run: Path) -> int:
    """Cut the capture folder out of one run; the number of files changed."""
    meta_path = run / "meta.json"
    meta = json.loads(meta_path.read_text())
    captured = meta.get("paths_relative_to") or meta["cwd"]
    prefix = captured.rstrip("/") + "/"
    changed = 0
    for path in sorted(p for p in run.rglob("*") if p.is_file() and p.name != "meta.json"):
        if path.name == "analysis.json" or path.parent.name == "findings":
            continue  # the analysis is stored afresh below
        if path.suffix == ".parquet":
            changed += _rewrite_part(path, prefix)
        elif path.suffix in TEXT_SUFFIXES:
            changed += _rewrite_text(path, prefix)
    meta = _strip(meta, prefix)
    meta["paths_relative_to"] = captured
    meta["cwd"] = captured
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return changed


def reanalyze(run: Path) -> None:
    """Store the current analysis: `tpuscope show RUN --reanalyze` (its report is not needed)."""
    subprocess.run(
        [sys.executable, "-m", "tpuscope", "show", str(run), "--reanalyze", "--json"],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def main() -> None:
    for meta in sorted(SAMPLES.glob("*/meta.json")):
        changed = relativize(meta.parent)
        reanalyze(meta.parent)
        print(f"{meta.parent.name}: {changed} file(s) made relative, analysis stored")


if __name__ == "__main__":
    main()
