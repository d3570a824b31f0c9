"""The simulated pod, run once per test session and shared by the tests that read it.

Five real torch_xla processes on the CPU, each its own host (`TPUSCOPE_HOST=host-k`,
`RANK=k`), all under `tpuscope run --run-id exp42` into one local store, running
tests/programs/pod.py: host-3 sleeps in its step (a straggler), host-1 compiles its own
graph at steps 4 and 6 with another shape each time, host-2 reads the loss with
`.item()` in every step, and host-4 hangs in step 6 and is killed with its launcher
(SIGKILL, after its rows of step 5 are flushed): a lost host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq

from tests.conftest import ROOT, tpuscope_cmd
from tpuscope.detect.run_analysis import current
from tpuscope.store import Run

PROGRAM = ROOT / "tests" / "programs" / "pod.py"
HOSTS = 5
STEPS = 24  # enough judged steps that a host's own two compile steps do not move its median
WARMUP = 3  # steps 0-1 compile, step 2 holds the barrier that starts the hosts together
RUN_ID = "exp42"
_MADE: dict[str, SimpleNamespace] = {}


def marked_line(marker: str) -> str:
    """'pod.py:NN' of the line of the pod program that carries the marker comment."""
    for number, line in enumerate(PROGRAM.read_text().splitlines(), 1):
        if marker in line:
            return f"pod.py:{number}"
    raise AssertionError(marker)


def _launch(store: Path, rank: int, barrier: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    env.update(TPUSCOPE_HOST=f"host-{rank}", RANK=str(rank))
    args = [str(STEPS), "slow=3", "extra=1", "item=2", "hang=4:6", f"barrier={barrier}:{HOSTS}"]
    cmd = tpuscope_cmd(
        "run",
        "--store",
        str(store),
        "--run-id",
        RUN_ID,
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


def _flushed(run_dir: Path, host: str, step: int) -> bool:
    """The host's row of this step is in one of its part files."""
    for part in (run_dir / "steps").glob(f"part-{host}-*.parquet"):
        if step in pq.read_table(part, columns=["step"]).column("step").to_pylist():
            return True
    return False


def _lose_host(run_dir: Path, launcher: subprocess.Popen[str], host: str) -> None:
    """The host is lost: its launcher and program die at once, no one is left to record an end."""
    (child,) = [
        json.loads(p.read_text())["pid"] for p in (run_dir / "procs").glob(f"{host}-*.json")
    ]
    os.kill(launcher.pid, signal.SIGSTOP)  # the program runs in its own process group
    os.kill(child, signal.SIGKILL)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(30)


def pod_run(base: Path) -> SimpleNamespace:
    """Run the pod once (in base/pod-store) and hand back its store, run folder and outputs."""
    if "pod" not in _MADE:
        store, barrier = base / "pod-store", base / "pod-barrier"
        store.mkdir(parents=True)
        barrier.mkdir()
        procs = [_launch(store, rank, barrier) for rank in range(HOSTS)]
        outputs = {rank: procs[rank].communicate(timeout=600) for rank in range(HOSTS - 1)}
        run_dir = store / RUN_ID
        deadline = time.monotonic() + 60
        while not _flushed(run_dir, "host-4", 5) and time.monotonic() < deadline:
            time.sleep(0.2)
        _lose_host(run_dir, procs[-1], "host-4")
        # what `tpuscope show` says before anyone re-analyses: the last launcher's analysis
        before = current(Run(run_dir)).summary
        _MADE["pod"] = SimpleNamespace(
            store=store, run_dir=run_dir, procs=procs, outputs=outputs, before=before
        )
    return _MADE["pod"]
