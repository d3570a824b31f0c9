"""`tpuscope run` reacts to signals as the bare program does: a real pty's Ctrl-C, kill(1) to
the launcher, SIGKILL of the launcher (the child must not be left behind) and both killed at
once (the run reads "ended unknown"). The program is tests/programs/signals.py (plain Python:
the launcher is what is tested). About 10 s.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import tpuscope
from tests.conftest import ROOT, tpuscope_cmd

PROGRAM = ROOT / "tests" / "programs" / "signals.py"


def wait_for(check, timeout: float = 20.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Running, and not a zombie left for a parent to reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def read_pid(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text(), what=f"{path}"))


def only_run(store: Path) -> Path:
    (run_dir,) = [p for p in store.iterdir() if p.is_dir()]
    return run_dir


# -- a real terminal ----------------------------------------------------------------------------
def in_pty(argv: list[str], interrupt_after: str) -> tuple[int, str]:
    """Run argv as the session leader of a new pty, type Ctrl-C once `interrupt_after` is printed;
    (wait status as subprocess gives it, everything the terminal showed)."""
    try:
        master, slave = pty.openpty()
    except OSError as exc:
        pytest.skip(f"no pseudo-terminal here: {exc}")

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        # a terminal's job, not this test run's: a shell without job control starts background
        # commands with SIGINT and SIGQUIT ignored (and nohup SIGHUP), which exec keeps and
        # Python honours (a suite started as `cmd &` made the bare program ignore the Ctrl-C)
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)

    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_terminal,
        env=env,
    )
    os.close(slave)
    shown, typed = b"", False
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every process holding the terminal has ended
            break
        if not chunk:
            break
        shown += chunk
        if not typed and interrupt_after.encode() in shown:
            state = signal_state(proc.pid)
            os.write(master, b"\x03")
            typed = True
    os.close(master)
    IN_PTY_STATE[argv[-1]] = state if typed else "never typed"
    return proc.wait(timeout=30), shown.decode(errors="replace")


IN_PTY_STATE: dict[str, str] = {}


def signal_state(pid: int | str = "self") -> str:
    """A process's blocked, ignored and caught signals as the kernel sees them (a C library's
    sigaction is not in Python's signal.getsignal)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return str(exc)
    return " ".join(line.replace("\t", "") for line in status if line.startswith("Sig"))


def test_ctrl_c_in_a_terminal_stops_the_program_as_without_tpuscope(tmp_path: Path) -> None:
    pidfile = str(tmp_path / "bare.pid")
    bare_code, bare = in_pty([sys.executable, str(PROGRAM), pidfile], "step 20")
    assert bare_code == -signal.SIGINT and "KeyboardInterrupt" in bare, (
        f"the bare program: {IN_PTY_STATE[pidfile]}; this test's process: {signal_state()}, "
        f"SIGINT handler {signal.getsignal(signal.SIGINT)}; output ends {bare[-300:]!r}"
    )
    store = tmp_path / "s"
    code, shown = in_pty(
        tpuscope_cmd(
            "run", "--store", str(store), "-q", "python", str(PROGRAM), str(tmp_path / "p.pid")
        ),
        "step 20",
    )
    assert code == bare_code, shown
    assert "interrupted at step" in shown and "step 299" not in shown
    assert (
        shown.count("KeyboardInterrupt") == bare.count("KeyboardInterrupt") == 1
    )  # delivered once
    assert "During handling" not in shown
    meta = tpuscope.load_run(only_run(store)).meta
    assert meta["status"] == "killed by SIGINT" and meta["exit_code"] == -signal.SIGINT
    assert meta["end_ns"] > meta["start_ns"]


# -- signals sent to the launcher alone ---------------------------------------------------------
def launch(
    tmp_path: Path, *args: str, ignoring: tuple[int, ...] = (), quiet: bool = True
) -> tuple[subprocess.Popen[str], int, Path]:
    """tpuscope run of the signals program with no terminal, the launcher started with the
    `ignoring` signals ignored (as `nohup` starts it), `-q` unless not `quiet`; (launcher,
    child pid, store)."""

    def ignore() -> None:
        for sig in ignoring:
            signal.signal(sig, signal.SIG_IGN)

    store = tmp_path / "s"
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    launcher = subprocess.Popen(
        tpuscope_cmd(
            "run",
            "--store",
            str(store),
            *(["-q"] if quiet else []),
            "python",
            str(PROGRAM),
            str(tmp_path / "p.pid"),
            *args,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        preexec_fn=ignore if ignoring else None,
    )
    return launcher, read_pid(tmp_path / "p.pid"), store


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name
)
def test_signals_to_the_launcher_reach_the_program_once(
    tmp_path: Path, sig: signal.Signals
) -> None:
    launcher, child, store = launch(tmp_path, "count")
    launcher.send_signal(sig)
    out, err = launcher.communicate(timeout=30)
    assert f"counts [('{sig.name}', 1)]" in out, out + err
    assert launcher.returncode == 3  # the program's own exit status
    meta = tpuscope.load_run(only_run(store)).meta
    assert meta["status"] == "failed" and meta["exit_code"] == 3


def test_a_hang_up_that_nohup_ignores_does_not_hurry_the_launcher(tmp_path: Path) -> None:
    """`nohup tpuscope run ...`: SIGHUP is ignored by the launcher as by the bare program, so a
    hang-up asks nothing of it; passed on (the program here counts it and exits 3), the run
    ends as usual, with its report, not as a launcher asked to go would."""
    launcher, child, store = launch(tmp_path, "count", ignoring=(signal.SIGHUP,), quiet=False)
    launcher.send_signal(signal.SIGHUP)
    out, err = launcher.communicate(timeout=30)
    assert "counts [('SIGHUP', 1)]" in out, out + err
    assert launcher.returncode == 3
    assert "no rows recorded" in err, err  # the end's report: the launcher was not hurried


def test_sigterm_to_the_launcher_ends_the_run_with_the_program(tmp_path: Path) -> None:
    launcher, child, store = launch(tmp_path)
    wait_for(lambda: launcher.stdout.readline().startswith("step 5"), what="step 5")
    launcher.terminate()
    launcher.communicate(timeout=30)
    assert (
        launcher.returncode == -signal.SIGTERM
    )  # as `timeout` or `docker stop` would see the bare program
    assert not alive(child)
    meta = tpuscope.load_run(only_run(store)).meta
    assert meta["status"] == "killed by SIGTERM" and meta["exit_code"] == -signal.SIGTERM
    assert meta["end_ns"] >= meta["start_ns"]
    # the program ran no backend, so the run has no rows: not analysed at its end (it would cost
    # more than the program), analysed by `show` when asked, like any ended run
    assert not list(only_run(store).glob("*/part-*.parquet"))
    shown = subprocess.run(
        tpuscope_cmd("show", only_run(store).name, "--store", str(store), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["findings"] == []
    assert json.loads(shown.stdout)["summary"]["status"] == "killed by SIGTERM"


def test_sigkill_of_the_launcher_leaves_no_orphan_and_the_child_records_the_end(
    tmp_path: Path,
) -> None:
    launcher, child, store = launch(tmp_path)
    wait_for(lambda: launcher.stdout.readline().startswith("step 5"), what="step 5")
    launcher.kill()
    launcher.wait(timeout=10)
    wait_for(lambda: not alive(child), what="the orphaned child to end")
    meta = wait_for(
        lambda: (m := tpuscope.load_run(only_run(store)).meta).get("end_ns") and m,
        timeout=60,
        what="meta end",
    )  # the child's exit path, slow on a loaded machine
    assert meta["status"] == "killed by SIGTERM" and meta["launcher_lost"] is True


def test_a_run_whose_every_process_died_reads_as_ended_unknown(tmp_path: Path) -> None:
    """What a machine crash leaves: nobody recorded the end. The launcher is gone, so the run is
    not shown as running."""
    launcher, child, store = launch(tmp_path)
    wait_for(lambda: launcher.stdout.readline().startswith("step 5"), what="step 5")
    os.kill(child, signal.SIGSTOP)  # so it cannot record the end when the launcher dies
    launcher.kill()
    launcher.wait(timeout=10)
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: not alive(child), what="the child to end")
    run_dir = only_run(store)
    assert tpuscope.load_run(run_dir).meta["status"].startswith("ended unknown (last write at 20")
    listing = subprocess.run(
        tpuscope_cmd("ls", "--store", str(store), "--json"), capture_output=True, text=True
    )
    (listed,) = json.loads(listing.stdout)
    assert listed["status"].startswith("ended unknown")


def test_a_ctrl_c_inside_tpuscopes_hook_ends_the_traceback_at_the_caller() -> None:
    """Issue 29: a KeyboardInterrupt raised while tpuscope's code runs in the program's thread
    (a step hook) is shown ending at the frame that called tpuscope, as without tpuscope."""
    import traceback

    from tpuscope.collect.session import _OWN_DIR, without_own_tail

    hook: dict[str, object] = {}  # a step hook of tpuscope's, where the signal lands
    exec(
        compile(
            "def on_step():\n    raise KeyboardInterrupt\n",
            _OWN_DIR + "collect/hook_for_test.py",
            "exec",
        ),
        hook,
    )
    try:
        hook["on_step"]()  # type: ignore[operator]  # the program's call of the hook
    except KeyboardInterrupt as exc:
        frames = traceback.extract_tb(without_own_tail(exc.__traceback__))
    assert frames[-1].filename == __file__ and "on_step" in (frames[-1].line or "")
