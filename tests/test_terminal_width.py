"""Terminal output never cuts an identity (issue 29): run ids, names and `file:line` stay whole
in `ls`, `show`, `diff`, `trace` and `query` at 80 columns (what a pipe or a CI log gets) and
narrower, with run ids longer than the line. Runs: two golden samples copied under long ids, and
a real TPU trace (tpu_inference_2) imported under a long name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT, real_trace, run_tpuscope
from tpuscope.cli.main import main
from tpuscope.report.console import where

LONG = "a-run-whose-id-is-much-longer-than-any-terminal-column-would-hold"
IDS = {"recompile_storm": f"{LONG}-storm", "fallback_host_sync": f"{LONG}-fallbacks"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("widths")
    for sample, run_id in IDS.items():
        shutil.copytree(ROOT / "sample_traces" / sample, root / run_id)
    proc = run_tpuscope(
        "import",
        "--store",
        str(root),
        "--quiet",
        "--name",
        f"{LONG}-trace",
        str(real_trace("xplane/tpu_inference_2.xplane.pb")),
    )
    assert proc.returncode == 0, proc.stderr
    return root


def _trace_id(store: Path) -> str:
    return next(p.name for p in store.iterdir() if p.name.startswith(f"{LONG}-trace"))


def cli(store: Path, width: int, *args: str) -> str:
    """The command's stdout at `width` columns, as a pipe gets it."""
    result = CliRunner().invoke(
        main,
        [args[0], "--store", str(store), *args[1:]],
        env={"COLUMNS": str(width), "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def _locations(store: Path, run_id: str) -> list[str]:
    report = json.loads(cli(store, 80, "show", run_id, "--json"))
    summary = report["summary"]
    found = [f["location"] for f in report["findings"] if f.get("location")]
    found += [where(c["location"]) for c in summary["compile_causes"] if c.get("location")]
    found += [where(op["location"]) for op in summary["fallback_ops"] if op.get("location")]
    assert found
    return found


@pytest.mark.parametrize("width", [80, 40])
def test_ls_keeps_every_run_id_whole(store: Path, width: int) -> None:
    out = cli(store, width, "ls")
    for run_id in [*IDS.values(), _trace_id(store)]:
        assert run_id in out
    assert "…" not in out


@pytest.mark.parametrize("width", [80, 40, 200])
@pytest.mark.parametrize("run_id", IDS.values())
def test_show_keeps_the_run_id_and_every_location_whole(
    store: Path, run_id: str, width: int
) -> None:
    out = cli(store, width, "show", run_id)
    assert run_id in out
    for location in _locations(store, run_id):
        assert location in out, location
    assert "…" not in out


def test_diff_keeps_both_run_ids_and_the_findings_locations_whole(store: Path) -> None:
    a, b = IDS.values()
    out = cli(store, 80, "diff", a, b)
    assert a in out and b in out
    for location in _locations(store, a) + _locations(store, b):
        if location.startswith("/"):  # a finding's location (the tables' are relative to here)
            assert where(location) in out or location in out
    assert "…" not in out


def test_trace_keeps_the_run_and_the_ops_names_whole(store: Path, tmp_path: Path) -> None:
    trace_id = _trace_id(store)
    out = cli(store, 80, "trace", trace_id, "-o", str(tmp_path / "t.json.gz"))
    view = json.loads(
        cli(store, 80, "trace", trace_id, "--json", "-o", str(tmp_path / "t.json.gz"))
    )
    for op in view["cost_model"]["ops"][:8]:
        assert op["module"] in out and op["op"] in out
    for device in view["devices"]:
        assert device["device"] in out
    assert "…" not in out


def test_query_keeps_text_cells_whole(store: Path) -> None:
    trace_id = _trace_id(store)
    out = cli(
        store,
        80,
        "query",
        trace_id,
        "SELECT hlo_op, expression, self_time_us FROM xprof_ops LIMIT 3",
    )
    rows = json.loads(
        cli(
            store,
            80,
            "query",
            trace_id,
            "SELECT hlo_op, expression FROM xprof_ops LIMIT 3",
            "--json",
        )
    )
    for row in rows:
        assert row["hlo_op"] in out and row["expression"] in out
    assert "…" not in out
