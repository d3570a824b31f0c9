"""`tpuscope run` end to end on real torch_xla (CPU): counts, compiles, exits, crashes, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import tpuscope
from tests.conftest import ROOT, run_tpuscope

PROGRAMS = ROOT / "tests" / "programs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Real runs of tests/programs/steps.py, made once for the module, keyed by ending."""
    store = tmp_path_factory.mktemp("runs")
    made: dict[str, tuple[Path, subprocess.CompletedProcess[str], dict]] = {}

    def get(
        ending: str = "", steps: int = 5
    ) -> tuple[Path, subprocess.CompletedProcess[str], dict]:
        if ending not in made:
            name = f"steps-{ending.replace(' ', '') or 'ok'}"
            counters = store / f"{name}.json"
            proc = run_tpuscope(
                "run",
                "--store",
                str(store),
                "--name",
                name,
                "--warmup",
                "1",
                "python",
                str(PROGRAMS / "steps.py"),
                str(steps),
                str(counters),
                *ending.split(),
            )
            run_dir = next(p for p in store.iterdir() if p.name.startswith(f"{name}-"))
            own = json.loads(counters.read_text()) if counters.exists() else {}
            made[ending] = (run_dir, proc, own)
        return made[ending]

    return get


def test_counts_match_torch_xla_own_counters(runs) -> None:
    run_dir, proc, own = runs("")
    assert proc.returncode == 0, proc.stderr
    run = tpuscope.load_run(run_dir)
    assert len(run.steps) == 5  # one step per torch_xla.sync()
    assert list(run.steps["step"]) == [0, 1, 2, 3, 4]
    counters = run.metrics[run.metrics["kind"] == "counter"].groupby("name")["count"].sum()
    for name in ("UncachedCompile", "MarkStep", "CachedCompile"):
        assert counters.get(name, 0) == own["counters"].get(name, 0), name
    compile_samples = own["metrics"]["CompileTime"][0]
    assert len(run.compiles) == compile_samples == own["counters"]["UncachedCompile"]
    assert run.compiles["duration_ns"].sum() == pytest.approx(
        own["metrics"]["CompileTime"][1], rel=1e-6
    )


def test_counters_that_first_move_late_still_add_up(runs) -> None:
    """Counter names are listed only on some steps (collect/xla/counters.py): a counter that first moves
    on another step is counted at the next listing, and one that moves after the last step
    is counted when the process closes."""
    run_dir, proc, own = runs("late", steps=24)
    assert proc.returncode == 0, proc.stderr
    metrics = tpuscope.load_run(run_dir).metrics
    late = metrics[metrics["name"] == "TpuscopeLate"]
    assert late["count"].sum() == own["counters"]["TpuscopeLate"] == 3
    assert (
        12 <= late["step"].min() < 23
    )  # the periodic full read after step 12, not the one at exit
    after = metrics[metrics["name"] == "TpuscopeAfterLoop"]
    assert after["count"].sum() == 2 and list(after["step"]) == [23]
    counters = metrics[metrics["kind"] == "counter"].groupby("name")["count"].sum()
    for name in ("UncachedCompile", "CachedCompile", "MarkStep"):  # (executions finish async)
        assert counters.get(name, 0) == own["counters"].get(name, 0), name
    # op counters are not core: read on full-read steps only, yet their totals are exact
    ops = [name for name in own["counters"] if name.startswith("xla::")]
    assert ops and all(counters.get(name, 0) == own["counters"][name] for name in ops)
    mm = metrics[metrics["name"] == "xla::mm"]
    assert 0 < len(mm) < 24 and mm["step"].max() == 23  # not every step; the rest at exit
    per_step = metrics[metrics["name"] == "MarkStep"]
    assert list(per_step["step"]) == list(range(24))  # core: every step


def test_metrics_are_split_over_steps_by_sample_time(runs) -> None:
    """Steps between full reads read no metric (collect/xla/counters.py); each full read splits the
    samples since the previous one over those steps by time: every step still gets its
    own rows, and the totals are torch_xla's."""
    run_dir, proc, own = runs("late", steps=24)
    assert proc.returncode == 0, proc.stderr
    run = tpuscope.load_run(run_dir)
    graphs = run.metrics[run.metrics["name"] == "TensorsGraphSize"]  # one graph per sync
    assert list(graphs.sort_values("step")["step"]) == list(range(24))
    assert (graphs["count"] == 1).all() and graphs["count"].sum() == own["metrics"][
        "TensorsGraphSize"
    ][0]
    assert graphs["total"].sum() == pytest.approx(own["metrics"]["TensorsGraphSize"][1])
    compiles = run.metrics[run.metrics["name"] == "CompileTime"]
    assert compiles["count"].sum() == own["metrics"]["CompileTime"][0]
    assert set(compiles["step"]) == set(run.steps.loc[run.steps["compiles"] > 0, "step"])
    known = run.steps["execute_ns"].notna()  # ExecuteTime is read on full-read steps only
    assert known.iloc[:2].all() and 0 < known.sum() < 24


def test_compile_rows_carry_cause_hash_and_user_line(runs) -> None:
    run_dir, _, _ = runs("")
    compiles = tpuscope.load_run(run_dir).compiles
    first = compiles.iloc[0]
    assert first["cause"] == "user torch_xla.sync"
    # torch_xla prints its 128-bit graph hash in hex without leading zeros (31 digits 1 in 16)
    assert re.fullmatch(r"[0-9a-f]{20,32}", first["graph_hash"])
    lines = (PROGRAMS / "steps.py").read_text().splitlines()
    sync_line = lines.index("    torch_xla.sync()") + 1
    assert first["location"] == f"{PROGRAMS / 'steps.py'}:{sync_line}"
    assert first["num_inputs"] >= 1 and first["input_gb"] is not None


def test_meta_records_versions_device_and_env(runs) -> None:
    run_dir, proc, _ = runs("")
    meta = tpuscope.load_run(run_dir).meta
    assert meta["status"] == "finished" and meta["exit_code"] == 0
    assert meta["env_set"]["PJRT_DEVICE"] == "CPU"
    assert (
        "no TPU found: torch_xla ran on the CPU (PJRT_DEVICE=CPU, set by tpuscope)" in proc.stderr
    )
    (proc_meta,) = meta["processes"]
    assert proc_meta["backend"] == "torch_xla" and proc_meta["device_kind"] == "CPU"
    assert {"python", "torch", "torch_xla", "tpuscope"} <= set(proc_meta["versions"])
    assert proc_meta["argv"][0].endswith("steps.py")


def test_run_reports_what_tpuscope_itself_cost(runs) -> None:
    """Every step hook is timed (steps that compiled apart) and the flushes' CPU time kept."""
    run_dir, proc, _ = runs("late", steps=24)
    run = tpuscope.load_run(run_dir)
    (cost,) = [p["profiler_cost"] for p in run.meta["processes"]]
    compiled = run.steps["compiles"].gt(0).sum()
    assert cost["hook_calls"] + cost["compile_hook_calls"] == len(run.steps) == 24
    assert cost["compile_hook_calls"] == compiled >= 1
    assert cost["hook_ns"] > 0 and cost["flushes"] >= 1 and cost["flush_cpu_ns"] > 0
    per_step = (cost["hook_ns"] / cost["hook_calls"] + cost["flush_cpu_ns"] / 24) / 1e6
    summary = run_tpuscope("show", "--store", str(run_dir.parent), run_dir.name, "--json")
    assert json.loads(summary.stdout)["summary"]["profiler_ms_per_step"] == pytest.approx(per_step)
    assert "tpuscope cost" in proc.stdout + proc.stderr


def test_exit_code_is_passed_through(runs) -> None:
    run_dir, proc, _ = runs("exit 3")
    assert proc.returncode == 3
    meta = tpuscope.load_run(run_dir).meta
    assert meta["status"] == "failed" and meta["exit_code"] == 3
    assert len(tpuscope.load_run(run_dir).steps) == 5


def test_exception_leaves_a_complete_readable_run(runs) -> None:
    run_dir, proc, _ = runs("raise")
    assert proc.returncode == 1
    assert "boom in step 2" in proc.stderr  # the program's own traceback stays visible
    run = tpuscope.load_run(run_dir)
    assert len(run.steps) == 3
    (proc_meta,) = run.meta["processes"]
    assert proc_meta["status"] == "exception"
    assert "RuntimeError: boom in step 2" in proc_meta["error"]


def test_sigkill_keeps_every_flushed_step(runs) -> None:
    run_dir, proc, _ = runs("sigkill")
    assert proc.returncode == -9  # the launcher ends as the program did: killed by SIGKILL
    run = tpuscope.load_run(run_dir)
    assert run.meta["status"] == "killed by SIGKILL"
    assert len(run.steps) == 5
    assert not list(run_dir.rglob(".*.tmp"))  # no half-written part file


def test_show_json_reads_the_run_back(runs, tmp_path: Path) -> None:
    run_dir, _, _ = runs("")
    proc = run_tpuscope("show", "--store", str(run_dir.parent), run_dir.name, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["summary"]["steps"] == 5
    assert data["summary"]["compiles"] >= 1
    assert isinstance(data["findings"], list)
    listing = run_tpuscope("ls", "--store", str(run_dir.parent), "--json")
    assert run_dir.name in {m["run_id"] for m in json.loads(listing.stdout)}


def test_missing_script_is_a_clear_error_and_makes_no_run(tmp_path: Path) -> None:
    proc = run_tpuscope("run", "--store", str(tmp_path / "s"), "python", "no_such_train.py")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tpuscope: script not found: no_such_train.py"
    assert not (tmp_path / "s").exists()


def test_unknown_run_and_unwritable_store(tmp_path: Path) -> None:
    proc = run_tpuscope("show", "--store", str(tmp_path), "nope")
    assert proc.returncode == 2 and "no run 'nope'" in proc.stderr
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = run_tpuscope("run", "--store", str(blocker / "store"), "python", "-c", "pass")
    assert proc.returncode == 2
    assert f"cannot write to the store {blocker / 'store'}" in proc.stderr


def test_program_that_fails_to_import_keeps_its_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import no_such_module_xyz\n")
    proc = run_tpuscope("run", "--store", str(tmp_path / "s"), "python", str(script))
    assert proc.returncode == 1
    assert "ModuleNotFoundError" in proc.stderr
    (run_dir,) = (tmp_path / "s").iterdir()
    meta = tpuscope.load_run(run_dir).meta
    assert meta["status"] == "failed" and meta["processes"][0]["status"] == "exception"


def test_script_module_and_inline_forms(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "hello.py").write_text("import sys; print('hi', sys.argv[1:])\n")
    store = str(tmp_path / "s")
    by_module = run_tpuscope("run", "--store", store, "-q", "-m", "pkg.hello", "a", cwd=tmp_path)
    assert by_module.returncode == 0 and "hi ['a']" in by_module.stdout
    (tmp_path / "t.py").write_text("print('script ran')\n")
    by_file = run_tpuscope("run", "--store", store, "-q", "t.py", cwd=tmp_path)
    assert by_file.returncode == 0 and "script ran" in by_file.stdout
    inline = run_tpuscope("run", "--store", store, "-q", "python", "-c", "raise SystemExit(4)")
    assert inline.returncode == 4
    names = sorted(p.name.split("-")[0] for p in (tmp_path / "s").iterdir())
    assert names == ["hello", "python", "t"]


def test_user_settings_are_never_overridden(tmp_path: Path) -> None:
    env = {"PJRT_DEVICE": "CPU", "PT_XLA_DEBUG_LEVEL": "0"}
    proc = run_tpuscope(
        "run",
        "--store",
        str(tmp_path),
        "-q",
        "python",
        "-c",
        "import os; print(os.environ['PT_XLA_DEBUG_LEVEL'], os.environ['PJRT_DEVICE'])",
        env=env,
    )
    assert proc.stdout.strip() == "0 CPU"
    (run_dir,) = tmp_path.iterdir()
    meta = tpuscope.load_run(run_dir).meta
    assert "PT_XLA_DEBUG_LEVEL" not in meta["env_set"]
    assert set(meta["env_left_to_user"]) >= {"PJRT_DEVICE", "PT_XLA_DEBUG_LEVEL"}


def test_spawned_workers_write_one_run(tmp_path: Path) -> None:
    proc = run_tpuscope(
        "run", "--store", str(tmp_path), "-q", "python", str(PROGRAMS / "workers.py"), "3"
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    run = tpuscope.load_run(run_dir)
    workers = [p for p in run.meta["processes"] if p.get("backend") == "torch_xla"]
    assert len(workers) == 2
    per_pid = run.steps.groupby("pid").size()
    assert sorted(per_pid.index) == sorted(p["pid"] for p in workers)
    assert list(per_pid) == [3, 3]
    assert os.getpid() not in set(per_pid.index)
