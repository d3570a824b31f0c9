"""The run store: one folder per run, holding meta.json and a folder of Parquet parts per table.

Layout (documented in docs/store.md):
    <store>/<run_id>/meta.json              launcher's view: argv, status, times, env set
    <store>/<run_id>/procs/<host>-<pid>.json  each process's view: versions, device, rank, end
    <store>/<run_id>/hosts/<host>.json       a run joined by --run-id: each host's launcher view
    <store>/<run_id>/<table>/part-*.parquet  rows, appended by any number of processes
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpuscope.schema import SCHEMA_VERSION
from tpuscope.store.hosts import combine, is_pod_run
from tpuscope.store.liveness import ended_unknown, launcher_gone

DEFAULT_STORE = "./tpuscope-runs"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class StoreError(Exception):
    """A store or run that cannot be used; the message names it."""


def default_store() -> Path:
    return Path(os.environ.get("TPUSCOPE_STORE") or DEFAULT_STORE)


def is_valid_run_id(run_id: str) -> bool:
    return bool(_RUN_ID.match(run_id)) and ".." not in run_id


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def write_json_atomic(path: Path, data: dict[str, Any], make_folder: bool = True) -> None:
    """Write JSON so that it appears whole or not at all; on a full disk nothing is left behind.

    Only the file's own folder is made (`procs/`), never the run folder: a run deleted while
    its program runs stays deleted."""
    if make_folder:
        path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # flusher and main may race
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str, sort_keys=True))
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; {} when absent, StoreError when it is there but unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{path} does not hold a JSON object")
    return data


def update_meta(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge fields into a run's meta.json (written whole, atomically).

    A meta.json that does not parse is not merged into (that would silently drop what it
    held): it is kept beside as meta.json.corrupt and the new fields start a fresh one."""
    path = Path(run_dir) / "meta.json"
    try:
        meta = read_json(path)
    except StoreError:
        os.replace(path, path.with_name("meta.json.corrupt"))
        meta = {"run_id": Path(run_dir).name, "meta_was_corrupt": True}
    meta.update(fields)
    write_json_atomic(path, meta, make_folder=False)
    return meta


def check_schema(meta: dict[str, Any], run_dir: Path) -> None:
    """Refuse a run written by a newer tpuscope: its tables may mean other things."""
    version = meta.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise StoreError(f"run {Path(run_dir).name} has schema version {version!r}, newer than this "
                         f"tpuscope reads ({SCHEMA_VERSION}): upgrade tpuscope to read it")


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The run's meta with every process's own meta under 'processes'.

    The run id is always the folder's name (a copied or renamed run is found where it is).
    A run still marked running whose launcher is gone (machine crash, SIGKILL with no child
    left to record the end) reads as "ended unknown (last write at T)". Unreadable process
    files are named under 'warnings' and left out."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "meta.json")
    check_schema(meta, run_dir)
    procs_dir = run_dir / "procs"
    procs, warnings = [], []
    for path in sorted(procs_dir.glob("*.json")) if procs_dir.is_dir() else []:
        try:
            procs.append(read_json(path))
        except StoreError as exc:
            warnings.append(str(exc))
    meta["processes"] = [p for p in procs if p]
    if is_pod_run(run_dir):  # one run of many hosts: each host's launcher wrote its own meta
        meta = combine(meta, run_dir, warnings)
    if warnings:
        meta["warnings"] = warnings
    if meta.get("run_id") not in (None, run_dir.name):
        meta["recorded_run_id"] = meta["run_id"]
    meta["run_id"] = run_dir.name
    if meta.get("status") == "running" and not meta.get("hosts") and launcher_gone(meta.get("launcher")):
        meta["status"] = ended_unknown(run_dir)
    return meta


class RunStore:
    """A folder of runs. Creating a run checks the folder is writable first."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_store()

    def new_run(self, name: str, **meta: Any) -> Path:
        """A new run folder with its meta.json; a taken id draws another one."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for _ in range(100):
                run_id = f"{safe}-{stamp}-{secrets.token_hex(2)}"
                run_dir = self.root / run_id
                try:
                    run_dir.mkdir()
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"no free run id for {safe}-{stamp}")
            write_json_atomic(
                run_dir / "meta.json",
                {"run_id": run_id, "name": name, "schema_version": SCHEMA_VERSION, **meta},
            )
        except OSError as exc:
            raise StoreError(f"cannot write to the store {self.root}: {exc.strerror or exc}") from exc
        return run_dir

    def run_dirs(self) -> Iterator[Path]:
        if not self.root.is_dir():
            return iter(())
        return (p for p in self.root.iterdir() if p.is_dir() and (p / "meta.json").is_file())

    def list_runs(self, warn: list[str] | None = None) -> list[dict[str, Any]]:
        """Every readable run's meta, newest first; a run whose meta.json cannot be read is
        left out and named in `warn` (or on stderr)."""
        metas = []
        for path in self.run_dirs():
            try:
                metas.append(read_meta(path))
            except StoreError as exc:
                _warn(warn, f"skipped a run: {exc}")
        return sorted(metas, key=lambda m: m.get("start_ns") or 0, reverse=True)

    def resolve(self, run: str | os.PathLike[str]) -> Path:
        """A run id (or unique prefix, or 'latest') in this store, or a path to a run folder."""
        text = str(run)
        as_path = Path(text)
        if (as_path / "meta.json").is_file() and (os.sep in text or not is_valid_run_id(text)):
            return as_path
        if text == "latest":
            runs = self.list_runs()
            if not runs:
                raise StoreError(f"no runs in the store {self.root}")
            return self.root / runs[0]["run_id"]  # the folder's name (read_meta)
        if not is_valid_run_id(text):
            raise StoreError(f"not a valid run id: {text!r}")
        exact = self.root / text
        if (exact / "meta.json").is_file():
            return exact
        matches = [p for p in self.run_dirs() if p.name.startswith(text)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            names = ", ".join(sorted(p.name for p in matches)[:5])
            raise StoreError(f"run id {text!r} is ambiguous in {self.root}: {names}")
        raise StoreError(f"no run {text!r} in the store {self.root}")


_SAID: set[str] = set()


def _warn(into: list[str] | None, message: str) -> None:
    """Into the caller's list, or once per process on stderr (the dashboard lists runs often)."""
    if into is not None:
        into.append(message)
    elif message not in _SAID:
        _SAID.add(message)
        print(f"tpuscope: {message}", file=sys.stderr)
