"""Run the user's program as a child that reacts to signals as it would without tpuscope.

The launcher must be invisible: Ctrl-C in a terminal reaches the program (the terminal
sends it to the whole foreground process group, so the launcher does not send it a
second time), SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to the launcher alone (`kill`,
`timeout`, a scheduler, `docker stop`) are passed on, and the launcher ends with the
program's own status, re-raising the signal that killed it. The child also must not
outlive a launcher killed by SIGKILL: it gets a real-time signal then (PR_SET_PDEATHSIG on
Linux), whose default action ends it and for which its session records the run's end first
(SIGTERM itself keeps its default action in the child: it must end the program at once).

Signals are taken synchronously (blocked, then `sigtimedwait`), which also says who sent
each one: a terminal's signals come from the kernel (SI_KERNEL), `kill` from a process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from tpuscope.collect.envvars import ENV_LAUNCHER_PID, LAUNCHER_LOST_SIGNAL_OFFSET

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_WATCHED = (*FORWARDED, signal.SIGCHLD)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: the terminal's Ctrl-C, Ctrl-\, hang-up
_PR_SET_PDEATHSIG = 1
_REPEAT_S = 0.5  # one sender's same signal again within this: a group kill that also reached us
# Signals that ask the program to go now (`timeout`, `docker stop`, a scheduler, a closed
# terminal): once the program has ended, the launcher must end too, not start analysing.
HURRY = (signal.SIGTERM, signal.SIGHUP)


def _has_terminal() -> bool:
    """True when this process has a controlling terminal (job control must then keep working)."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:
        return False
    return True


def _pdeathsig() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's prctl, looked up before the fork (the child must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


class Child:
    """The running program: started with the launcher's signals blocked, waited for here."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.shares_group = (
            _has_terminal()
        )  # else its own group: a group kill reaches it once, from us
        launcher = os.getpid()
        prctl = _pdeathsig()
        env = {**env, ENV_LAUNCHER_PID: str(launcher)}
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)

        def child_setup() -> None:  # runs in the forked child, before exec
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGRTMIN + LAUNCHER_LOST_SIGNAL_OFFSET, 0, 0, 0)
            if os.getppid() != launcher:  # the launcher died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)
            if not self.shares_group:
                os.setpgid(0, 0)

        try:
            self.proc = subprocess.Popen(list(argv), env=env, preexec_fn=child_setup)  # noqa: PLW1509
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            raise
        self._last: dict[int, tuple[int, float]] = {}
        # The launcher was sent a HURRY signal while the program ran: it ends with the program,
        # as the bare program would, and leaves the analysis to `tpuscope show`. (A program
        # that killed itself, or was killed alone, is analysed as usual: nobody waits.)
        self.hurried = False
        # HURRY signals the launcher was started ignoring (`nohup`, a shell's background job):
        # the bare program ignores them too, so they ask nothing; still passed on (the program
        # may handle them itself), they never hurry the launcher.
        self._ignored = {sig for sig in HURRY if signal.getsignal(sig) == signal.SIG_IGN}

    def wait(self) -> int:
        """Pass signals on until the program ends; its return code (negative: killed by that signal).

        Signals that arrive once it has ended are taken too, so none of them kills the
        launcher before it records the end; later ones act as usual."""
        if not hasattr(signal, "sigtimedwait"):  # macOS: no sender to tell apart
            return self._wait_with_handlers()
        while (code := self.proc.poll()) is None:
            info = signal.sigtimedwait(_WATCHED, 1.0)
            if info is not None and self._hurries(info.si_signo):
                self.hurried = True
            if info is not None and info.si_signo != signal.SIGCHLD and self._should_forward(info):
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(info.si_signo)
        while (info := signal.sigtimedwait(_WATCHED, 0)) is not None:
            self.hurried = self.hurried or self._hurries(info.si_signo)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        return code

    def _wait_with_handlers(self) -> int:
        """Where signals cannot be waited for: handlers pass them on, except the ones a terminal
        also sends the program itself (Ctrl-C, Ctrl-\\) when it shares the terminal's group."""
        own = (signal.SIGINT, signal.SIGQUIT) if self.shares_group else ()

        def forward(signum: int, frame: object) -> None:
            self.hurried = self.hurried or self._hurries(signum)
            if signum not in own:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signum)

        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        try:
            return self.proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _hurries(self, signo: int) -> bool:
        return signo in HURRY and signo not in self._ignored

    def _should_forward(self, info: signal.struct_siginfo) -> bool:
        """Not what the terminal sent the whole group (the child has it), and once per burst:
        `timeout` signals its child and then its group, which reaches the launcher twice."""
        if info.si_code == _SI_KERNEL and self.shares_group:
            return False
        now = time.monotonic()
        previous = self._last.get(info.si_signo)
        self._last[info.si_signo] = (info.si_pid, now)
        return not (
            previous
            and previous[0] == info.si_pid
            and info.si_pid
            and now - previous[1] < _REPEAT_S
        )


def exit_as(code: int) -> None:
    """End this process with the program's status: its exit code, or the signal that killed it
    (re-raised on the launcher, without a core file, so a shell sees what it would have seen)."""
    if code >= 0:
        sys.exit(code)
    sig = -code
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught or reset
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)  # a signal whose default action does not end a process
