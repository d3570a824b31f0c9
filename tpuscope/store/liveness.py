"""Is the launcher of a "running" run still alive? (A machine crash leaves no one to say.)

The launcher records who it is (host, pid, the kernel's boot id and its own start time,
which together survive pid reuse and reboots); a reader on the same host can then tell a
live run from one whose launcher is gone, and show the latter as "ended unknown" with the
time of the run's last write instead of "running" forever.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from tpuscope.store.location import Location, mtime_ns

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def launcher_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "boot_id": _boot_id(),
        "started": _start_ticks(pid),
    }


def launcher_gone(identity: Any) -> bool:
    """True only when sure: same host, and another boot, or no such process any more."""
    if not isinstance(identity, dict) or identity.get("host") != socket.gethostname():
        return False
    boot = _boot_id()
    if boot is None or identity.get("boot_id") is None:
        return False
    if boot != identity["boot_id"]:
        return True
    pid = identity.get("pid")
    return isinstance(pid, int) and _start_ticks(pid) != identity.get("started")


def last_write_ns(run_dir: Path | Location) -> int:
    """The newest modification time of anything in the run folder."""
    loc = Location.of(run_dir)
    if not loc.local:
        found = loc.fs.find(loc.path, detail=True)
        return max((mtime_ns(info) for info in found.values()), default=0)
    newest = 0
    for root, _, files in os.walk(loc.path):
        for name in files:
            try:
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
            except OSError:
                continue
    return newest


def ended_unknown(run_dir: Path | Location) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last_write_ns(run_dir) / 1e9))
    return f"ended unknown (last write at {stamp})"
