"""Reading a run never writes it (issue 29): `tpuscope show` on the golden samples of a fresh
clone leaves `git status` clean; a stored analysis is current by the listing of parts recorded
in it, so a copied run (new mtimes) is read as stored; a run whose parts changed since is
analysed in memory, says so, and its analysis.json and findings part stay as they were."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpuscope.cli.main import main
from tpuscope.store import Run, layout

SAMPLES = sorted(p.parent.name for p in (ROOT / "sample_traces").glob("*/meta.json"))


def show(store: Path, run_id: str, *args: str) -> tuple[str, str]:
    result = CliRunner().invoke(
        main, ["show", "--store", str(store), run_id, *args], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def snapshot(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the run: its bytes and mtime."""
    return {
        str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def test_show_leaves_the_golden_samples_of_a_fresh_clone_unmodified(tmp_path: Path) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True
    )
    store = clone / "sample_traces"
    for sample in SAMPLES:
        out, err = show(store, sample)
        assert sample in out and "analysed now" not in err  # read as stored: current and whole
        assert (
            "/work/" not in out
        )  # the capture machine's folders are cut (scripts/golden_samples.py)
        show(store, sample, "--json")
    status = subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert status == ""


@pytest.fixture()
def analysed(tmp_path: Path) -> Path:
    """A golden sample copied and analysed now: its analysis.json records its parts."""
    store = tmp_path / "store"
    shutil.copytree(ROOT / "sample_traces" / "fallback_host_sync", store / "fallback_host_sync")
    show(store, "fallback_host_sync", "--reanalyze")
    written = json.loads((store / "fallback_host_sync" / layout.ANALYSIS).read_text())
    assert written["parts_digest"] == Run(store / "fallback_host_sync").parts_digest()
    return store / "fallback_host_sync"


def test_a_copied_run_is_read_as_stored(analysed: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copied" / "fallback_host_sync"
    shutil.copytree(analysed, copy, copy_function=shutil.copyfile)  # every file and folder new
    later = analysed.stat().st_mtime_ns + 10**9
    for path in copy.rglob(
        "*"
    ):  # the tables newer than analysis.json, as a checkout may leave them
        if path.is_dir():
            os.utime(path, ns=(later, later))
    assert Run(copy).analysis is not None
    before = snapshot(copy)
    _, err = show(copy.parent, copy.name)
    assert "analysed now" not in err
    assert snapshot(copy) == before


def test_a_changed_run_is_analysed_in_memory_and_left_as_it_was(analysed: Path) -> None:
    run = Run(analysed)
    steps = run.arrow("steps")
    run.write_arrow("steps", "extra-0000", steps.slice(0, 1))  # a part added since the analysis
    assert Run(analysed).analysis is None
    before = snapshot(analysed)
    out, err = show(analysed.parent, analysed.name, "--json")
    assert "analysed now, not stored (its tables changed since its analysis was stored)" in err
    assert (
        json.loads(out)["summary"]["analysed_now"]
        == "its tables changed since its analysis was stored"
    )
    assert snapshot(analysed) == before
