"""The watcher thread: polls the run's new parts, judges them, prints the alerts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import IO

from tpuscope.launch.alerts.judge import AlertJudge
from tpuscope.launch.alerts.printer import AlertPrinter
from tpuscope.launch.alerts.tail import PartTail

POLL_S = 1.0


class AlertWatcher:
    """Reads a run's new parts every POLL_S seconds on a thread of its own and prints alerts.
    Start it after the program's process exists (`tpuscope run` starts it once the child
    runs, so the thread inherits the launcher's blocked signals); `stop()` makes the last read."""

    def __init__(
        self,
        run_dir: str | Path,
        out: IO[str] | None = None,
        poll_s: float = POLL_S,
        printer: AlertPrinter | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.tail = PartTail(self.run_dir)
        self.judge = AlertJudge()
        self.printer = printer or AlertPrinter(out)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken = False
        self._lock = threading.Lock()
        self.polls = 0
        self.cpu_ns = 0  # the watcher's own CPU time (kept in the run's meta as alerts_cost)

    def start(self) -> AlertWatcher:
        self._thread = threading.Thread(target=self._loop, name="tpuscope-alerts", daemon=True)
        self._thread.start()
        return self

    def stop(self, final: bool = True) -> None:
        """Stop polling; with `final`, read what the program's last flush wrote and sum up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if final:
            self.poll(ended=True)
            if not self._broken:
                self.printer.tick(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self, ended: bool = False) -> None:
        """One read of the new parts; alerts and due summing-up lines printed."""
        if self._broken:
            return
        with self._lock:
            start = time.thread_time_ns()
            try:
                self._poll(ended)
            finally:
                self.cpu_ns += time.thread_time_ns() - start
                self.polls += 1

    def _poll(self, ended: bool) -> None:
        try:
            new = self.tail.poll()
            if not new and not ended:
                self.printer.tick()
                return
            from tpuscope.store.runstore import read_meta

            meta = read_meta(self.run_dir)
            problems, again = self.judge.update(new, meta, ended=ended)
            for problem in problems:
                self.printer.new(problem)
            for item in again:
                self.printer.again(item)
            if not ended:
                self.printer.tick()
        except Exception as exc:  # never a false alert, never a crash: stop and say so once
            self._broken = True
            self.printer.say(
                f"live alerts stopped ({type(exc).__name__}: {exc}); "
                "the report at the end is not affected"
            )

    @property
    def cost(self) -> dict[str, float]:
        return {
            "polls": self.polls,
            "cpu_s": round(self.cpu_ns / 1e9, 3),
            "lines": self.printer.lines,
        }
