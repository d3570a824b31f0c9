"""Runs written into object stores (a real GCS API server and a real S3 API server on
loopback, started by fixtures) and read back with `ls`, `show` and `query`; a SIGKILLed
program, an unreachable store. Each run is a real `tpuscope run` of a small torch_xla
program on the CPU (~15 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuscope, tpuscope_cmd
from tests.object_stores import ObjectStore, free_port

pytest.importorskip("torch_xla")
PROGRAM = str(Path(__file__).parent / "programs" / "store_steps.py")


@pytest.fixture(params=["gcs_store", "s3_store"])
def object_store(request: pytest.FixtureRequest) -> ObjectStore:
    return request.getfixturevalue(request.param)


def env_for(store: ObjectStore, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **store.env,
        "TPUSCOPE_STAGE": str(tmp_path / "stage"),
        "TPUSCOPE_SHIP_INTERVAL": "0.5",
        **extra,
    }


def cli_json(*args: str, env: dict[str, str]) -> object:
    proc = run_tpuscope(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def objects(store: ObjectStore, prefix: str) -> list[str]:
    fs = store.filesystem()
    return sorted(p.split(f"{prefix}/", 1)[1] for p in fs.find(f"{store.bucket}/{prefix}"))


@pytest.mark.slow
def test_a_run_into_an_object_store_reads_back_with_ls_show_and_query(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    url = object_store.url(f"runs-{tmp_path.name}")
    env = env_for(object_store, tmp_path)
    proc = run_tpuscope(
        "run", "--store", url, "--name", "remote", "python", PROGRAM, "8", "0.3", env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran 8 steps\n"  # the program's own output, unchanged
    assert not any((tmp_path / "stage").iterdir())  # every file arrived: the stage is gone
    (listed,) = cli_json(
        "ls", "--json", env={**env, "TPUSCOPE_STORE": url}
    )  # the store from the environment
    assert listed["status"] == "finished" and listed["store"] == url
    run_id = listed["run_id"]
    same = cli_json("diff", "--store", url, run_id, run_id, "--json", env=env)
    assert same["regression"] is None and same["a"]["run_id"] == same["b"]["run_id"] == run_id
    shown = cli_json("show", "--store", url, run_id, "--json", env=env)
    steps = cli_json(
        "query",
        "--store",
        url,
        run_id,
        "SELECT step, wall_ns FROM steps ORDER BY step",
        "--json",
        env=env,
    )
    assert shown["summary"]["steps"] == len(steps) >= 8
    assert [s["step"] for s in steps] == list(range(len(steps)))
    per_host = cli_json(
        "query",
        "--store",
        url,
        run_id,
        "SELECT host, count(*) AS n, median(wall_ns)/1e6 AS p50_ms FROM steps GROUP BY host",
        "--json",
        env=env,
    )
    assert [row["n"] for row in per_host] == [len(steps)] and per_host[0]["p50_ms"] > 0
    # one object per table: the batches shipped while the program ran were merged when it ended
    names = objects(object_store, f"runs-{tmp_path.name}/{run_id}")
    parts = [n for n in names if n.endswith(".parquet")]
    assert sorted({n.split("/")[0] for n in parts}) == sorted(n.split("/")[0] for n in parts)
    assert "-compact-" in next(
        n for n in parts if n.startswith("steps/")
    )  # 2.4 s of steps: 2 flushes
    assert {"meta.json", "analysis.json"} <= set(names) and any(
        n.startswith("procs/") for n in names
    )
    assert any(n.startswith("debug/pt_xla_debug-") for n in names)


@pytest.mark.slow
def test_a_sigkilled_program_keeps_the_rows_of_its_last_flush(
    gcs_store: ObjectStore, tmp_path: Path
) -> None:
    url = gcs_store.url(f"killed-{tmp_path.name}")
    env = {**os.environ, **env_for(gcs_store, tmp_path)}
    env.pop("PJRT_DEVICE", None)
    pidfile = tmp_path / "pid"
    launcher = subprocess.Popen(
        tpuscope_cmd(
            "run", "--store", url, "-q", "python", PROGRAM, "6", "0", "hold", str(pidfile)
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # past one flush interval (2 s): the 6 steps are in a part
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == -signal.SIGKILL, stderr  # tpuscope ends as its program did
    (listed,) = cli_json("ls", "--store", url, "--json", env=env)
    assert listed["status"] == "killed by SIGKILL"
    steps = cli_json(
        "query",
        "--store",
        url,
        listed["run_id"],
        "SELECT step FROM steps ORDER BY step",
        "--json",
        env=env,
    )
    assert [s["step"] for s in steps] == list(range(6))


@pytest.mark.slow
def test_an_unreachable_store_is_one_line_and_the_exit_status_is_the_programs(
    tmp_path: Path,
) -> None:
    pytest.importorskip("s3fs")
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        "AWS_ENDPOINT_URL_S3": closed,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "TPUSCOPE_STAGE": str(tmp_path / "stage"),
        "TPUSCOPE_SHIP_INTERVAL": "0.5",
    }
    proc = run_tpuscope(
        "run",
        "--store",
        "s3://nowhere/runs",
        "-q",
        "python",
        PROGRAM,
        "3",
        "0",
        "exit",
        "3",
        env=env,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "ran 3 steps\n"
    said = [line for line in proc.stderr.splitlines() if "s3://nowhere/runs" in line]
    assert len([line for line in said if "cannot write to the store" in line]) == 1, proc.stderr
    assert not [
        line for line in proc.stderr.splitlines() if line.startswith(("Traceback", "  File"))
    ], proc.stderr
    (stage,) = (tmp_path / "stage").iterdir()  # kept, whole, and named
    assert str(stage) in proc.stderr
    local = cli_json(
        "query",
        "--store",
        str(tmp_path / "stage"),
        stage.name,
        "SELECT count(*) AS n FROM steps",
        "--json",
        env={},
    )
    assert local == [{"n": 3}]


WATCHED = """
import pytest
import torch
import torch_xla


@pytest.mark.tpuscope(max_recompiles=0)
def test_static_steps():
    device = torch_xla.device()
    w = torch.randn(4, 4, device=device)
    for _ in range(4):
        w = torch.tanh(w @ w)
        torch_xla.sync()
"""


@pytest.mark.slow
def test_the_pytest_plugin_saves_watched_tests_into_an_object_store(
    gcs_store: ObjectStore, tmp_path: Path
) -> None:
    url = gcs_store.url(f"pytest-{tmp_path.name}")
    (tmp_path / "test_watched.py").write_text(WATCHED)
    env = {**os.environ, **env_for(gcs_store, tmp_path)}
    env.pop("PJRT_DEVICE", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--tpuscope-store={url}",
            "test_watched.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "gs:").exists()  # not a local folder named after the scheme
    (listed,) = cli_json("ls", "--store", url, "--json", env=env)
    assert listed["test"] == "test_watched.py::test_static_steps"
    steps = cli_json(
        "query",
        "--store",
        url,
        listed["run_id"],
        "SELECT count(*) AS n FROM steps",
        "--json",
        env=env,
    )
    assert steps[0]["n"] >= 4
