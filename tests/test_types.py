"""The type checker over the whole package (issues 28 and 42).

`[tool.mypy]` in pyproject.toml names it: every module of tpuscope, the collectors, the
importers, the CLI and the dashboard as much as the analysis. The analysis contract
(tpuscope/analyze/contract.py) is what every surface reads as attributes: a key renamed there
fails here, not as a silent None in one report. mypy keeps its incremental cache in the
temporary folder (outside the checkout), so a second run on the same machine takes seconds.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import ROOT


def test_mypy_is_clean_on_the_whole_package() -> None:
    cache = Path(tempfile.gettempdir()) / "tpuscope-mypy-cache"
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    modules = len(list((ROOT / "tpuscope").rglob("*.py")))  # none left out of the check
    assert f"Success: no issues found in {modules} source files" in proc.stdout, proc.stdout


def test_every_stored_summary_reads_back_as_written() -> None:
    """The golden samples' analysis.json (written by older versions of the analysis) read as a
    RunSummary and written back: the same JSON, key for key and in order (`show --json`)."""
    from tpuscope.analyze.contract import RunSummary

    for path in sorted((ROOT / "sample_traces").glob("*/analysis.json")):
        text = path.read_text()
        stored = json.loads(text)
        summary = RunSummary.from_dict(stored)
        assert json.dumps(summary.to_dict(), indent=1) == json.dumps(stored, indent=1), path
        assert summary.steps == stored["steps"] and summary.compile_causes[0].count > 0, path
        assert {**summary} == stored  # its JSON form, for scripts that read keys


def test_a_summary_made_now_writes_its_keys_in_the_contract_order() -> None:
    from tpuscope.analyze.contract import FallbackOp, HostSummary, PodSummary, RunSummary

    summary = RunSummary(
        run_id="r", steps=3, fallback_ops=[FallbackOp(op="aten::nonzero", count=4)]
    )
    written = summary.to_dict()
    assert list(written) == [k for k in RunSummary.declared() if k in written]
    assert "hosts" not in written and "host_steps" not in written and "analysed_now" not in written
    assert written["fallback_ops"][0]["op"] == "aten::nonzero" and summary.fallback_count == 4
    summary.pod = PodSummary([HostSummary(host="h0"), HostSummary(host="h1")], None)
    assert summary.to_dict()["host_steps"] is None and summary.to_dict()["hosts"][1]["host"] == "h1"


def test_the_row_types_are_the_tables_columns() -> None:
    """tpuscope/schema_rows.py types the rows `table_row` builds (mypy checks every call's
    keys and values against them); they name exactly the columns of schema.TABLES that a
    writer fills (the session adds the process fields)."""
    from tpuscope.schema import PROCESS_FIELDS, TABLES, table_row
    from tpuscope.schema_rows import ROW_TYPES

    process = {f.name for f in PROCESS_FIELDS}
    for table, row_type in ROW_TYPES.items():
        columns = [n for n in TABLES[table].names if n not in process]
        assert list(row_type.__annotations__) == columns, table
        assert list(table_row(table, step=1)) == columns


def test_each_shared_name_has_one_definition_in_the_package() -> None:
    """Issue 42: Shape/parse_shape, Evidence, severity/wall_s/judged_steps/run_wall_s and
    xplane_files were each defined in two modules with different meanings (return types,
    arguments), and the HLO opcodes that move no data were two sets that drifted apart."""
    names = {
        "Shape",
        "parse_shape",
        "Evidence",
        "severity",
        "wall_s",
        "judged_steps",
        "run_wall_s",
        "xplane_files",
        "NO_TRAFFIC_OPCODES",
    }
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tpuscope").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in defined:
                if name in names or name == "_FREE":
                    found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert {n: where for n, where in found.items() if len(where) != 1} == {}
    assert set(found) == names  # and no module keeps a `_FREE` opcode set of its own
