"""A loop that reacts to signals; for the launcher's signal tests (no torch: it is the launcher
that is under test, and this starts in a fraction of a second).

usage: signals.py PIDFILE [count]
Prints "step N" every 0.05 s for up to 300 steps (15 s). Default: signals act as Python's
defaults (Ctrl-C raises KeyboardInterrupt, which is re-raised after a 0.5 s pause so that a
second delivery would show as a second traceback). "count": SIGINT/SIGTERM/SIGHUP/SIGQUIT are
counted; 0.5 s after the first one the counts are printed and the program exits 3.
"""

import os
import signal
import sys
import time

pidfile, mode = sys.argv[1], sys.argv[2:]
counts: dict[str, int] = {}
if mode == ["count"]:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda signum, frame: counts.__setitem__(signal.Signals(signum).name,
                                                                    counts.get(signal.Signals(signum).name, 0) + 1))
with open(pidfile + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
try:
    for step in range(300):
        print(f"step {step}", flush=True)
        time.sleep(0.05)
        if counts:
            time.sleep(0.5)
            print("counts", sorted(counts.items()), flush=True)
            sys.exit(3)
except KeyboardInterrupt:
    print(f"interrupted at step {step}", flush=True)
    time.sleep(0.5)
    raise
