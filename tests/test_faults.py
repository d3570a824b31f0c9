"""Faults a profiler must survive without changing the program: torch_xla.launch and mp.spawn
(the runtime is the program's to start), a malformed line in the live PT_XLA_DEBUG file, a full
disk (a real 2 MB tmpfs), a store deleted mid-run, a missing executable. About 30 s, most of it
the one torch_xla.launch run.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

import tpuscope
from tests.conftest import ROOT, run_tpuscope

PROGRAMS = ROOT / "tests" / "programs"


@pytest.fixture(scope="module")
def launched(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    store = tmp_path_factory.mktemp("launch")
    proc = run_tpuscope(
        "run", "--store", str(store), "-q", "python", str(PROGRAMS / "launch_spawn.py"), "4"
    )
    (run_dir,) = store.iterdir()
    return run_dir, proc


def test_torch_xla_launch_runs_under_tpuscope(launched) -> None:
    """torch_xla.launch refuses to start once anything initialized the runtime; the collector
    reads device facts only after the program's first step."""
    run_dir, proc = launched
    assert proc.returncode == 0, proc.stderr
    assert "Runtime is already initialized" not in proc.stderr
    assert "worker launch 0 0" in proc.stdout
    run = tpuscope.load_run(run_dir)
    (worker,) = [p for p in run.meta["processes"] if p.get("device_kind")]
    assert worker["device_kind"] == "CPU" and worker["device_count"] >= 1
    assert list(run.steps["step"]) == [0, 1, 2, 3] and set(run.steps["pid"]) == {worker["pid"]}
    assert set(run.steps["rank"]) == {worker["rank"]} == {0}  # xr.global_ordinal() of the worker


def test_mp_spawn_workers_record_their_own_rank(launched) -> None:
    run_dir, _ = launched
    procs = tpuscope.load_run(run_dir).meta["processes"]
    spawned = [
        p
        for p in procs
        if p.get("argv", [""])[0].endswith("launch_spawn.py") and not p.get("backend")
    ]
    assert sorted(p["rank"] for p in spawned)[-2:] == [0, 1]


def test_a_malformed_live_debug_line_never_reaches_the_program(launched) -> None:
    """The launched worker appended 'Number of Graph Inputs: many' to its PT_XLA_DEBUG file
    mid-run; parsing it ran inside its torch_xla.sync() and used to raise ValueError there."""
    run_dir, proc = launched
    assert proc.returncode == 0 and "ValueError" not in proc.stderr
    (debug_file,) = [
        p for p in (run_dir / "debug").glob("pt_xla_debug-*.txt") if "many" in p.read_text()
    ]
    assert len(tpuscope.load_run(run_dir).compiles) >= 1


# -- the store fails under the program --------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a 2 MB tmpfs here (needs root): {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def tpuscope_lines(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if line.startswith("tpuscope:") and "no TPU found" not in line
    ]


def test_a_full_disk_never_changes_the_exit_status(tiny_disk: Path) -> None:
    store = tiny_disk / "store"
    proc = run_tpuscope(
        "run", "--store", str(store), "-q", "python", str(PROGRAMS / "fill_disk.py"), str(tiny_disk)
    )
    assert proc.returncode == 0, proc.stderr
    assert "program done" in proc.stdout and "Traceback" not in proc.stderr
    said = tpuscope_lines(proc.stderr)
    assert 1 <= len(said) <= 2 and all("No space left on device" in line for line in said), (
        said
    )  # one per process
    assert not list(tiny_disk.rglob("*.tmp"))
    (run_dir,) = store.iterdir()
    meta = tpuscope.load_run(run_dir).meta  # what was written stays readable
    assert meta["argv"][-1] == str(tiny_disk) and meta["processes"][0]["status"] == "running"
    assert meta["status"].startswith(
        "ended unknown"
    )  # its end could not be written; no one is running


def test_a_store_deleted_mid_run_stays_deleted_and_the_program_goes_on(tmp_path: Path) -> None:
    store = tmp_path / "store"
    code = (
        "import os, shutil, time; shutil.rmtree(os.path.dirname(os.environ['TPUSCOPE_RUN_DIR']));"
        "time.sleep(2.5); print('still here'); raise SystemExit(5)"
    )
    proc = run_tpuscope("run", "--store", str(store), "python", "-c", code)
    assert proc.returncode == 5 and "still here" in proc.stdout
    assert "Traceback" not in proc.stderr
    said = tpuscope_lines(proc.stderr)
    assert len(said) == 2 and "cannot record the run" in said[-1], said  # one line per process
    assert not store.exists()


def test_a_missing_executable_exits_127_like_a_shell(tmp_path: Path) -> None:
    name = f"no-such-program-{uuid.uuid4().hex[:6]}"
    assert shutil.which(name) is None
    proc = run_tpuscope("run", "--store", str(tmp_path), name)
    assert proc.returncode == 127
    assert tpuscope_lines(proc.stderr) == [
        f"tpuscope: cannot start {name}: No such file or directory"
    ]
    (run_dir,) = tmp_path.iterdir()
    meta = tpuscope.load_run(run_dir).meta
    assert meta["status"] == "failed to start" and meta["exit_code"] == 127
