"""Fills the disk under the run store mid-run (tests/test_faults.py).

usage: fill_disk.py DIR   fills DIR's file system, sleeps past the 2 s flush interval, prints
"program done" and exits 0. Plain Python: the launcher's and the session's writes are tested,
and a torch_xla import would cost seconds.
"""

import sys
import time

try:
    with open(f"{sys.argv[1]}/filler", "wb") as handle:
        while True:
            handle.write(b"\0" * 65536)
except OSError:
    pass
time.sleep(2.2)
print("program done", flush=True)
