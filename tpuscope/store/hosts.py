"""Which host a process is, and one run written by many hosts (a TPU pod slice).

Host identity: `TPUSCOPE_HOST` when set (a test's simulated hosts, a user's own names),
else the TPU worker the TPU environment names (`TPU_WORKER_ID`, which GKE and
torch_xla's launcher set, or `CLOUD_TPU_TASK_ID`; with `MEGASCALE_SLICE_ID` in a
multislice job the slice too: `slice1-worker-3`), else the machine's hostname (a TPU
VM's is `t1v-n-...-w-3`). `tpuscope run` resolves it once and passes it to the program
in `TPUSCOPE_HOST`, so every process of a host agrees.

One run, many hosts: `tpuscope run --run-id exp42` (or `TPUSCOPE_RUN_ID`) on every host
joins one run folder. Every host writes only its own files: part files named by host and
pid, `procs/<host>-<pid>.json`, and its launcher's view in `hosts/<host>.json` (argv,
status, exit code, times). The run's `meta.json` holds only what all hosts share and is
created once, by whichever host comes first; nothing a host writes is ever overwritten
by another, so a slow or lost host never blocks the others. A reader combines the hosts'
files into the run's status (`combine`).
"""

from __future__ import annotations

import os
import re
import socket
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_HOST = "TPUSCOPE_HOST"
ENV_RUN_ID = "TPUSCOPE_RUN_ID"
HOSTS_DIR = "hosts"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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


def is_pod_run(run_dir: Path) -> bool:
    """A run joined by id (`--run-id`): its launchers each keep their own hosts/<host>.json."""
    return (Path(run_dir) / HOSTS_DIR).is_dir()


def _last_write_ns(run_dir: Path, host: str) -> int:
    """Newest mtime of this host's own files (its parts, its procs and its host meta)."""
    tag = f"-{safe_host(host)}-"
    newest = 0
    for root, _, files in os.walk(run_dir):
        for name in files:
            if (
                tag in name
                or name == f"{safe_host(host)}.json"
                or name.startswith(f"{safe_host(host)}-")
            ):
                try:
                    newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
                except OSError:
                    continue
    return newest


def host_status(run_dir: Path, host_meta: dict[str, Any]) -> str:
    """A host's status; one still "running" whose launcher is gone (SIGKILL, machine lost) is
    "lost (last write at T)": its rows up to its last flush are in the run."""
    import time

    from tpuscope.store.liveness import launcher_gone

    status = str(host_meta.get("status") or "unknown")
    if status == "running" and launcher_gone(host_meta.get("launcher")):
        written = _last_write_ns(run_dir, str(host_meta.get("host")))
        stamp = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(written / 1e9)) if written else "?"
        )
        return f"lost (last write at {stamp})"
    return status


def combined_status(statuses: list[str]) -> str:
    """One status for the run: the hosts' own when they agree, else how many ended how
    ("running (3 of 4 hosts)", "3 finished, 1 lost")."""
    if not statuses:
        return "running"
    kinds = Counter(s.split(" (")[0] for s in statuses)
    if len(kinds) == 1:
        return statuses[0] if len(set(statuses)) == 1 else next(iter(kinds))
    if kinds.get("running"):
        return f"running ({kinds['running']} of {len(statuses)} hosts)"
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())


def read_hosts(run_dir: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """Every host's launcher meta with its status judged now; unreadable ones named in warnings."""
    from tpuscope.store.runstore import StoreError, read_json

    hosts = []
    folder = Path(run_dir) / HOSTS_DIR
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_json(path)
        except StoreError as exc:
            warnings.append(str(exc))
            continue
        if data:
            data.setdefault("host", path.stem)
            hosts.append({**data, "status": host_status(run_dir, data)})
    return hosts


def combine(meta: dict[str, Any], run_dir: Path, warnings: list[str]) -> dict[str, Any]:
    """The run's meta with the hosts' launcher metas folded in: `hosts` (one entry each),
    status, exit code, start and end across the hosts; argv and command of the first host."""
    hosts = read_hosts(run_dir, warnings)
    if not hosts:
        return meta
    first = hosts[0]
    for key in (
        "argv",
        "command",
        "cwd",
        "warmup",
        "deep",
        "env_set",
        "env_left_to_user",
        "target",
        "trace_steps",
        "tpuscope_version",
    ):
        if key in first and key not in meta:
            meta[key] = first[key]
    starts = [h["start_ns"] for h in hosts if h.get("start_ns")]
    ends = [h.get("end_ns") for h in hosts]
    codes = [h.get("exit_code") for h in hosts if h.get("exit_code") not in (None, 0)]
    meta.update(
        hosts=[
            {k: h.get(k) for k in ("host", "status", "exit_code", "start_ns", "end_ns")}
            for h in hosts
        ],
        status=combined_status([h["status"] for h in hosts]),
        start_ns=min(starts) if starts else meta.get("start_ns"),
        end_ns=max(ends) if ends and all(ends) else None,
        exit_code=codes[0]
        if codes
        else (0 if all(h.get("exit_code") == 0 for h in hosts) else None),
    )
    return meta


def update_host_meta(run_dir: Path, host: str, /, **fields: Any) -> dict[str, Any]:
    """Merge fields into this host's own hosts/<host>.json (no other host writes it)."""
    from tpuscope.store.runstore import StoreError, read_json, write_json_atomic

    path = host_meta_path(run_dir, host)
    try:
        data = read_json(path)
    except StoreError:
        data = {}
    data.update(fields)
    data["host"] = host
    write_json_atomic(path, data)
    return data


def join_run(root: Path, run_id: str, **shared: Any) -> Path:
    """The run folder `root/run_id` for one more host: made if absent, with a meta.json of what
    the hosts share created only by the first (link(2) fails when it exists: no host ever
    overwrites another's). A folder that exists as a single-host run is refused."""
    from tpuscope.schema import SCHEMA_VERSION
    from tpuscope.store.runstore import StoreError, is_valid_run_id, remove_quietly

    if not is_valid_run_id(run_id):
        raise StoreError(f"not a valid run id: {run_id!r} (letters, digits, '.', '_', '-')")
    run_dir = Path(root) / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if (run_dir / "meta.json").is_file() and not is_pod_run(run_dir):
            raise StoreError(
                f"run {run_id} already exists in {root} and was not started with --run-id: "
                "pick another id"
            )
        (run_dir / HOSTS_DIR).mkdir(exist_ok=True)
        meta = run_dir / "meta.json"
        if not meta.exists():
            tmp = run_dir / f".meta.json.{os.getpid()}.{safe_host(host_name())}.tmp"
            import json

            tmp.write_text(
                json.dumps(
                    {
                        "run_id": run_id,
                        "name": shared.pop("name", run_id),
                        "pod": True,
                        "schema_version": SCHEMA_VERSION,
                        **shared,
                    },
                    indent=2,
                    default=str,
                )
            )
            try:
                os.link(tmp, meta)
            except FileExistsError:
                pass  # another host was first: its meta stands
            finally:
                remove_quietly(tmp)
    except OSError as exc:
        raise StoreError(f"cannot write to the store {root}: {exc.strerror or exc}") from exc
    return run_dir
