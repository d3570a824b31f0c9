"""SIGTERM ends a profiled program inside a long XLA compile as at once as it ends the bare one.

A Python-level SIGTERM handler (what tpuscope once installed, to flush its last rows) runs only
when the interpreter gets control back: during a compile in C++ the program outlived the signal
(still alive 8 s after it; the bare program died in 0.1 s). SIGTERM now keeps its default action
in the program's process, and the launcher ends with the program instead of analysing the run.
One real run of tests/programs/long_compile.py (a JAX jit whose compile takes tens of seconds on
the CPU), killed during that compile; about 10 s, most of it JAX's import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import tpuscope
from tests.conftest import FAST_CPU_COMPILE, ROOT, tpuscope_cmd
from tests.test_signals import alive, only_run, read_pid, wait_for

PROGRAM = ROOT / "tests" / "programs" / "long_compile.py"
BARE_DEATH_S = 2.0  # the bare program dies in ~0.1 s (0.12 s at load 20); the compile lasts > 10 s


def flushed_rows(store: Path) -> int:
    """Rows of the run's part files on disk now (what a kill must not take back)."""
    if not store.is_dir() or not list(store.glob("*/*/part-*.parquet")):
        return 0
    run = tpuscope.load_run(only_run(store))
    return len(run.table("compiles"))


def test_sigterm_during_a_compile_ends_the_program_at_once_keeping_its_rows(tmp_path: Path) -> None:
    store = tmp_path / "s"
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    # the compile must last: XLA's optimizations on (the suite turns them off to compile faster)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace(FAST_CPU_COMPILE, "").strip()
    launcher = subprocess.Popen(
        tpuscope_cmd(
            "run", "--store", str(store), "-q", "python", str(PROGRAM), str(tmp_path / "p.pid")
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    child = read_pid(tmp_path / "p.pid")
    wait_for(
        lambda: launcher.stdout.readline().startswith("compiling"), timeout=120, what="the compile"
    )
    before = wait_for(lambda: flushed_rows(store), timeout=30, what="a flush")
    time.sleep(0.5)  # inside jit's compile now: C++, no Python runs until it returns
    sent = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    out, err = launcher.communicate(timeout=60)
    took = time.monotonic() - sent
    assert "compiled" not in out, "the compile ended before the signal: the test proves nothing"
    assert launcher.returncode == -signal.SIGTERM, (
        err
    )  # the bare program's status, as a shell sees it
    assert took < BARE_DEATH_S, f"{took:.1f} s from SIGTERM to the end ({err})"
    assert not alive(child)
    assert flushed_rows(store) >= before  # every row flushed before the kill is kept
    meta = tpuscope.load_run(only_run(store)).meta
    assert meta["status"] == "killed by SIGTERM" and meta["exit_code"] == -signal.SIGTERM
