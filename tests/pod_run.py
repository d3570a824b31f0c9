"""The simulated pods, each run once per test session and shared by the tests that read it.

Real torch_xla processes on the CPU, each its own host (`TPUSCOPE_HOST=host-k`, `RANK=k`),
all under `tpuscope run --run-id` into one store, running tests/programs/pod.py.

`pod_run`: five hosts into a local store. host-3 sleeps in its step (a straggler), host-1
compiles its own graph at steps 4 and 6 with another shape each time, host-2 reads the loss
with `.item()` in every step, and host-4 hangs in step 6 and is killed with its launcher
(SIGKILL, after its rows of step 5 are flushed): a lost host.

`remote_pod_run`: three hosts into an object store (the GCS emulator), cheaper: host-2 is
the straggler (48 steps of 60 ms: past a flush interval, so it ships several
batches that its end merges), host-1 compiles its own graph and reads `.item()`, host-0 hangs in step
LOST_STEP and is killed once its rows up to the step before reached the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq

from tests.conftest import ROOT, tpuscope_cmd
from tpuscope.detect.run_analysis import current
from tpuscope.store import Run
from tpuscope.store.location import Location

PROGRAM = ROOT / "tests" / "programs" / "pod.py"
HOSTS = 5
STEPS = 24  # enough judged steps that a host's own two compile steps do not move its median
WARMUP = 3  # steps 0-1 compile, step 2 holds the barrier that starts the hosts together
RUN_ID = "exp42"
REMOTE_HOSTS, REMOTE_STEPS, LOST_STEP, REMOTE_RUN_ID = 3, 48, 10, "exp43"
_MADE: dict[str, SimpleNamespace] = {}


@dataclass
class Pod:
    """One simulated pod: where it writes, how many hosts, what each does wrong."""

    store: str
    run_id: str
    hosts: int
    steps: int
    options: list[str]
    lost: tuple[int, int]  # (rank, the step it hangs in)
    env: dict[str, str] = field(default_factory=dict)


def marked_line(marker: str) -> str:
    """'pod.py:NN' of the line of the pod program that carries the marker comment."""
    for number, line in enumerate(PROGRAM.read_text().splitlines(), 1):
        if marker in line:
            return f"pod.py:{number}"
    raise AssertionError(marker)


def _launch(pod: Pod, rank: int, barrier: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    env.update(pod.env, TPUSCOPE_HOST=f"host-{rank}", RANK=str(rank))
    args = [
        str(pod.steps),
        *pod.options,
        f"hang={pod.lost[0]}:{pod.lost[1]}",
        f"barrier={barrier}:{pod.hosts}",
    ]
    cmd = tpuscope_cmd(
        "run",
        "--store",
        pod.store,
        "--run-id",
        pod.run_id,
        "--warmup",
        str(WARMUP),
        "--quiet",
        "python",
        str(PROGRAM),
        *args,
    )
    # its own session: the test, not a terminal, decides which signals it gets
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _flushed(run: Location, host: str, step: int) -> bool:
    """The host's row of this step is in one of its part files (in the store: shipped)."""
    for entry in (run / "steps").entries():
        if entry.name.startswith(f"part-{host}-"):
            with run.fs.open((run / "steps" / entry.name).path, "rb") as handle:
                if step in pq.read_table(handle, columns=["step"]).column("step").to_pylist():
                    return True
    return False


def _lose_host(procs: Path, launcher: subprocess.Popen[str], host: str) -> None:
    """The host is lost: its launcher and program die at once, no one is left to record an end."""
    (child,) = [json.loads(p.read_text())["pid"] for p in procs.glob(f"{host}-*.json")]
    os.kill(launcher.pid, signal.SIGSTOP)  # the program runs in its own process group
    os.kill(child, signal.SIGKILL)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(30)


def run_pod(pod: Pod, barrier: Path, procs_of_lost: Path) -> SimpleNamespace:
    """Run every host, wait for all but the lost one, then lose it once its rows up to the
    step before its hang are in the store."""
    barrier.mkdir()
    procs = [_launch(pod, rank, barrier) for rank in range(pod.hosts)]
    lost, hang = pod.lost
    outputs = {
        rank: procs[rank].communicate(timeout=600) for rank in range(pod.hosts) if rank != lost
    }
    run = Location.of(pod.store) / pod.run_id
    deadline = time.monotonic() + 60
    while not _flushed(run, f"host-{lost}", hang - 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    _lose_host(procs_of_lost, procs[lost], f"host-{lost}")
    # what `tpuscope show` says first: no launcher was last (the lost host still ran), so it analyses
    before = current(Run(run)).summary
    return SimpleNamespace(run=run, procs=procs, outputs=outputs, before=before)


def side_by_side(
    store: Path,
    run_id: str,
    tpuscope_args: list[str],
    program_args: list[str],
    barrier: Path,
    hosts: int = 2,
) -> list[subprocess.CompletedProcess[str]]:
    """`hosts` hosts of one pod run into a shared local folder, held together before step 2
    (as collectives hold a real pod's hosts), each run to its end; their finished processes."""
    barrier.mkdir()
    procs = []
    for rank in range(hosts):
        env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
        env.update(TPUSCOPE_HOST=f"host-{rank}", RANK=str(rank))
        cmd = tpuscope_cmd(
            "run",
            "--store",
            str(store),
            "--run-id",
            run_id,
            *tpuscope_args,
            "--quiet",
            "python",
            str(PROGRAM),
            *program_args,
            f"barrier={barrier}:{hosts}",
        )
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return out


def pod_run(base: Path) -> SimpleNamespace:
    """Run the local pod once (in base/pod-store) and hand back its store, run folder and outputs."""
    if "pod" not in _MADE:
        store = base / "pod-store"
        store.mkdir(parents=True)
        pod = Pod(str(store), RUN_ID, HOSTS, STEPS, ["slow=3", "extra=1", "item=2"], (4, 6))
        made = run_pod(pod, base / "pod-barrier", store / RUN_ID / "procs")
        _MADE["pod"] = SimpleNamespace(**vars(made), store=store, run_dir=store / RUN_ID)
    return _MADE["pod"]


def remote_pod_run(base: Path, url: str, env: dict[str, str]) -> SimpleNamespace:
    """Run the object-store pod once into `url` (each host staged under base/stage)."""
    if "remote" not in _MADE:
        stage = base / "remote-stage"
        env = {**env, "TPUSCOPE_STAGE": str(stage), "TPUSCOPE_SHIP_INTERVAL": "0.5"}
        os.environ.update({k: v for k, v in env.items() if k not in ("TPUSCOPE_STAGE",)})
        pod = Pod(
            url,
            REMOTE_RUN_ID,
            REMOTE_HOSTS,
            REMOTE_STEPS,
            ["slow=2", "extra=1", "item=1"],
            (0, LOST_STEP),
            env,
        )
        made = run_pod(pod, base / "remote-barrier", stage / "host-0" / REMOTE_RUN_ID / "procs")
        _MADE["remote"] = SimpleNamespace(**vars(made), store=url, env=env, stage=stage)
    return _MADE["remote"]
