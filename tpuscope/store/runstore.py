"""The run store: one folder per run, holding meta.json and a folder of Parquet parts per table.

Layout (documented in docs/store.md):
    <store>/<run_id>/meta.json              launcher's view: argv, status, times, env set
    <store>/<run_id>/procs/<host>-<pid>.json  each process's view: versions, device, rank, end
    <store>/<run_id>/<table>/part-*.parquet  rows, appended by any number of processes
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpuscope.schema import SCHEMA_VERSION

DEFAULT_STORE = "./tpuscope-runs"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class StoreError(Exception):
    """A store or run that cannot be used; the message names it."""


def default_store() -> Path:
    return Path(os.environ.get("TPUSCOPE_STORE") or DEFAULT_STORE)


def is_valid_run_id(run_id: str) -> bool:
    return bool(_RUN_ID.match(run_id)) and ".." not in run_id


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # flusher and main may race
    tmp.write_text(json.dumps(data, indent=2, default=str, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def update_meta(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge fields into a run's meta.json (written whole, atomically)."""
    meta = read_json(Path(run_dir) / "meta.json")
    meta.update(fields)
    write_json_atomic(Path(run_dir) / "meta.json", meta)
    return meta


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The run's meta with every process's own meta under 'processes'."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "meta.json")
    procs_dir = run_dir / "procs"
    procs = [read_json(p) for p in sorted(procs_dir.glob("*.json"))] if procs_dir.is_dir() else []
    meta["processes"] = [p for p in procs if p]
    meta.setdefault("run_id", run_dir.name)
    return meta


class RunStore:
    """A folder of runs. Creating a run checks the folder is writable first."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_store()

    def new_run(self, name: str, **meta: Any) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_id = f"{safe}-{stamp}-{secrets.token_hex(2)}"
        run_dir = self.root / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
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

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run's meta, newest first."""
        metas = [read_meta(p) for p in self.run_dirs()]
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
            return self.root / runs[0]["run_id"]
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
