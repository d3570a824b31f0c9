"""Which host a process is.

`TPUSCOPE_HOST` when set (a test's simulated hosts, a user's own names), else the TPU worker
the TPU environment names (`TPU_WORKER_ID`, which GKE and torch_xla's launcher set, or
`CLOUD_TPU_TASK_ID`; with `MEGASCALE_SLICE_ID` in a multislice job the slice too:
`slice1-worker-3`), else the machine's hostname (a TPU VM's is `t1v-n-...-w-3`). `tpuscope
run` resolves it once and passes it to the program in `TPUSCOPE_HOST`, so every process of a
host agrees. The host is part of every file name a process writes (part files, procs/,
hosts/); how many hosts join one run is `store.pods`.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

ENV_HOST = "TPUSCOPE_HOST"
ENV_RUN_ID = "TPUSCOPE_RUN_ID"
HOSTS_DIR = "hosts"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PART_NAME = re.compile(r"^part-(.+)-\d+-(?:compact-|s)?\d+\.parquet$")


def safe_host(name: str) -> str:
    """A host name usable inside file names (part-<host>-<pid>-<seq>, read from the right): no
    path separators or spaces; empty -> "host"."""
    return _UNSAFE.sub("_", name).strip("._-") or "host"


def host_name(env: Mapping[str, str] | None = None) -> str:
    """This process's host (see the module doc for the order of the sources)."""
    env = os.environ if env is None else env
    if env.get(ENV_HOST):
        return env[ENV_HOST].strip()
    worker = env.get("TPU_WORKER_ID") or env.get("CLOUD_TPU_TASK_ID")
    if worker and worker.strip().isdigit():
        slice_id = env.get("MEGASCALE_SLICE_ID", "").strip()
        prefix = (
            f"slice{slice_id}-"
            if slice_id.isdigit() and env.get("MEGASCALE_NUM_SLICES", "1") != "1"
            else ""
        )
        return f"{prefix}worker-{int(worker)}"
    return socket.gethostname()


def file_host(env: Mapping[str, str] | None = None) -> str:
    """The host as it appears in file names (part files, procs/, hosts/)."""
    return safe_host(host_name(env))


def host_meta_path(run_dir: Path, host: str) -> Path:
    return Path(run_dir) / HOSTS_DIR / f"{safe_host(host)}.json"


def part_host(name: str) -> str | None:
    """The host a part file's name carries (`part-<host>-<pid>-<seq>`, `-compact-<seq>`,
    `-s<seq>`: read from the right, so a host name with dashes stays whole), None for a
    name of another shape (a tag of an importer)."""
    match = _PART_NAME.match(name)
    return match.group(1) if match else None
