"""One run written by many hosts (a TPU pod slice): joining it, and reading it as one run.

`tpuscope run --run-id exp42` (or `TPUSCOPE_RUN_ID`) on every host joins one run folder.
Every host writes only its own files: part files named by host and pid,
`procs/<host>-<pid>.json`, and its launcher's view in `hosts/<host>.json` (argv, status,
exit code, times). The run's `meta.json` holds only what all hosts share and is created
once, by whichever host comes first; nothing a host writes is ever overwritten by another,
so a slow or lost host never blocks the others. A reader combines the hosts' files into the
run's status (`combine`).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpuscope.schema_consts import SCHEMA_VERSION
from tpuscope.store.files import (
    StoreError,
    create_json_once,
    is_valid_run_id,
    json_bytes,
    json_files,
    read_json,
    remove_quietly,
    stage_root,
    write_json_atomic,
)
from tpuscope.store.hosts import HOSTS_DIR, host_meta_path, host_name, part_host, safe_host
from tpuscope.store.liveness import launcher_gone
from tpuscope.store.location import Location, mtime_ns


def is_pod_run(run_dir: Path | Location, meta: Mapping[str, Any] | None = None) -> bool:
    """A run joined by id (`--run-id`): its launchers each keep their own hosts/<host>.json.
    Its meta.json says `pod: true`; a local folder is also known by its hosts/ folder (no
    request needed to look)."""
    if meta is not None and meta.get("pod") is True:
        return True
    loc = Location.of(run_dir)
    return loc.local and Path(loc.path, HOSTS_DIR).is_dir()


def _owned_by(name: str, host: str) -> bool:
    """A file of this host: its parts, its process files and host meta, its debug text."""
    return (
        part_host(name) == host
        or name == f"{host}.json"
        or name.startswith((f"{host}-", f"pt_xla_debug-{host}-"))
    )


def _last_write_ns(run: Location, host: str) -> int:
    """Newest mtime of this host's own files (its parts, its procs and its host meta)."""
    safe = safe_host(host)
    if not run.local:
        found = run.fs.find(run.path, detail=True)
        return max(
            (
                mtime_ns(info)
                for path, info in found.items()
                if _owned_by(path.rsplit("/", 1)[-1], safe)
            ),
            default=0,
        )
    newest = 0
    for root, _, files in os.walk(run.path):
        for name in files:
            if _owned_by(name, safe):
                try:
                    newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
                except OSError:
                    continue
    return newest


def host_status(run_dir: Path | Location, host_meta: dict[str, Any]) -> str:
    """A host's status; one still "running" whose launcher is gone (SIGKILL, machine lost) is
    "lost (last write at T)": its rows up to its last flush are in the run."""
    status = str(host_meta.get("status") or "unknown")
    if status == "running" and launcher_gone(host_meta.get("launcher")):
        written = _last_write_ns(Location.of(run_dir), str(host_meta.get("host")))
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


def read_hosts(run_dir: Path | Location, warnings: list[str]) -> list[dict[str, Any]]:
    """Every host's launcher meta with its status judged now (fetched together: one round
    of requests in an object store); unreadable ones named in warnings."""
    run = Location.of(run_dir)
    hosts = []
    for name, data in json_files(run / HOSTS_DIR, warnings):
        if data:
            data.setdefault("host", name.removesuffix(".json"))
            hosts.append({**data, "status": host_status(run, data)})
    return hosts


def combine(meta: dict[str, Any], run_dir: Path | Location, warnings: list[str]) -> dict[str, Any]:
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
        end_ns=max(e for e in ends if e) if ends and all(ends) else None,
        exit_code=codes[0]
        if codes
        else (0 if all(h.get("exit_code") == 0 for h in hosts) else None),
    )
    return meta


def hosts_running(run_dir: Path | Location) -> list[str]:
    """The hosts of a pod run still running now (a lost one is not: its launcher is gone).
    A pod's host that ends while others run leaves the analysis to the last one, so a pod of
    64 hosts is analysed about once, not 64 times (each a read of the whole pod)."""
    loc = Location.of(run_dir)
    try:
        if not is_pod_run(loc, read_json(loc / "meta.json")):
            return []
        return [str(h["host"]) for h in read_hosts(loc, []) if h["status"] == "running"]
    except Exception:  # an unreadable meta or store: analyse, as for any run (never fail here)
        return []


def update_host_meta(run_dir: Path, host: str, /, **fields: Any) -> dict[str, Any]:
    """Merge fields into this host's own hosts/<host>.json (no other host writes it)."""
    path = host_meta_path(run_dir, host)
    try:
        data = read_json(path)
    except StoreError:
        data = {}
    data.update(fields)
    data["host"] = host
    write_json_atomic(path, data)
    return data


def pod_meta(run_id: str, **shared: Any) -> dict[str, Any]:
    """The run's meta.json of a pod: only what every host has alike (id, name, schema, pod),
    so whichever host writes it writes the same bytes."""
    return {
        "run_id": run_id,
        "name": shared.pop("name", run_id),
        "pod": True,
        "schema_version": SCHEMA_VERSION,
        **shared,
    }


def _refuse_single(meta: dict[str, Any], run_id: str, root: object) -> None:
    if meta and meta.get("pod") is not True:
        raise StoreError(
            f"run {run_id} already exists in {root} and was not started with --run-id: "
            "pick another id"
        )


def _check_id(run_id: str) -> None:
    if not is_valid_run_id(run_id):
        raise StoreError(f"not a valid run id: {run_id!r} (letters, digits, '.', '_', '-')")


def join_run(root: Path, run_id: str, **shared: Any) -> Path:
    """The run folder `root/run_id` for one more host: made if absent, with a meta.json of what
    the hosts share created only by the first (link(2) fails when it exists: no host ever
    overwrites another's). A folder that exists as a single-host run is refused."""
    _check_id(run_id)
    run_dir = Path(root) / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = run_dir / "meta.json"
        if meta.is_file() and not is_pod_run(run_dir):
            _refuse_single(read_json(meta) or {"pod": False}, run_id, root)
        (run_dir / HOSTS_DIR).mkdir(exist_ok=True)
        if not meta.exists():
            tmp = run_dir / f".meta.json.{os.getpid()}.{safe_host(host_name())}.tmp"
            tmp.write_bytes(json_bytes(pod_meta(run_id, **shared)))
            try:
                os.link(tmp, meta)
            except FileExistsError:
                pass  # another host was first: its meta stands
            finally:
                remove_quietly(tmp)
    except OSError as exc:
        raise StoreError(f"cannot write to the store {root}: {exc.strerror or exc}") from exc
    return run_dir


def join_remote(store: Location, run_id: str, host: str, **shared: Any) -> Path:
    """One more host of the run `store/run_id` in an object store; returns its local stage.

    The run's meta.json (pod_meta: the same bytes from every host) is created with an
    exclusive write (fsspec's `mode="create"`: GCS `ifGenerationMatch=0`, S3
    `If-None-Match: *`), so the first host's stands; a server that ignores the condition
    (the GCS emulator does) gets the same bytes again, which changes nothing. A run of that
    id made without --run-id is refused. The stage is per host (`<stage>/<host>/<run_id>`:
    hosts simulated on one machine never ship each other's parts), and its shipper sends
    only this host's files (store.ship)."""
    from tpuscope.store.ship import start_shipping

    _check_id(run_id)
    remote = store / run_id
    meta = pod_meta(run_id, store=store.url, **shared)
    try:
        _refuse_single(read_json(remote / "meta.json"), run_id, store.url)
        create_json_once(remote / "meta.json", meta)
    except StoreError:
        raise
    except Exception as exc:  # unreachable: the shipper tries again; the program runs anyway
        print(
            f"tpuscope: cannot reach the store {store.url} yet: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}",
            file=sys.stderr,
        )
    stage = stage_root() / safe_host(host) / run_id
    try:
        (stage / HOSTS_DIR).mkdir(parents=True, exist_ok=True)
        write_json_atomic(stage / "meta.json", meta)
    except OSError as exc:
        raise StoreError(f"cannot write the stage {stage}: {exc.strerror or exc}") from exc
    start_shipping(stage, remote)
    return stage
