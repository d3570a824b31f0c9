"""The run store: one folder per run (the layout is `store.layout`), in a local folder or at
any fsspec URL (gs://, s3://); meta.json, the process files and (a run joined by --run-id)
each host's file are read and written here."""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpuscope.schema_consts import SCHEMA_VERSION
from tpuscope.store import layout
from tpuscope.store.files import (
    StoreError,
    is_valid_run_id,
    json_files,
    read_json,
    stage_root,
    write_json_atomic,
)
from tpuscope.store.liveness import ended_unknown, launcher_gone
from tpuscope.store.location import Location, LocationError
from tpuscope.store.pods import combine, is_pod_run

DEFAULT_STORE = "./tpuscope-runs"


def default_store() -> str:
    """$TPUSCOPE_STORE (a folder or any fsspec URL), else ./tpuscope-runs."""
    return os.environ.get("TPUSCOPE_STORE") or DEFAULT_STORE


def update_meta(run_dir: str | Path | Location, **fields: Any) -> dict[str, Any]:
    """Merge fields into a run's meta.json (written whole, atomically).

    A meta.json that does not parse is not merged into (that would silently drop what it
    held): it is kept beside as meta.json.corrupt and the new fields start a fresh one."""
    run = Location.of(run_dir)
    path = run / layout.META
    try:
        meta = read_json(path)
    except StoreError:
        run.fs.mv(path.path, (run / layout.META_CORRUPT).path)
        meta = {"run_id": run.name, "meta_was_corrupt": True}
    meta.update(fields)
    path.write_json_atomic(meta, make_folder=False)
    return meta


def check_schema(meta: dict[str, Any], run_dir: object) -> None:
    """Refuse a run written by a newer tpuscope: its tables may mean other things."""
    version = meta.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        name = Location.of(run_dir).name if isinstance(run_dir, str | Path | Location) else run_dir
        raise StoreError(
            f"run {name} has schema version {version!r}, newer than this "
            f"tpuscope reads ({SCHEMA_VERSION}): upgrade tpuscope to read it"
        )


def read_meta(run_dir: str | Path | Location) -> dict[str, Any]:
    """The run's meta with every process's own meta under 'processes'.

    The run id is always the folder's name (a copied or renamed run is found where it is).
    A run still marked running whose launcher is gone (machine crash, SIGKILL with no child
    left to record the end) reads as "ended unknown (last write at T)". Unreadable process
    files are named under 'warnings' and left out."""
    run = Location.of(run_dir)
    meta = read_json(run / layout.META)
    check_schema(meta, run)
    warnings: list[str] = []
    meta["processes"] = [p for _, p in json_files(run / layout.PROCS, warnings) if p]
    if is_pod_run(run, meta):  # one run of many hosts: each host's own meta
        meta = combine(meta, run, warnings)
    if warnings:
        meta["warnings"] = warnings
    if meta.get("run_id") not in (None, run.name):
        meta["recorded_run_id"] = meta["run_id"]
    meta["run_id"] = run.name
    if (
        meta.get("status") == "running"
        and not meta.get("hosts")
        and launcher_gone(meta.get("launcher"))
    ):
        meta["status"] = ended_unknown(run)
    return meta


def _local_metas(root: str) -> list[str]:
    """The meta.json of every run folder of a local store: one scandir and a stat per folder
    (fsspec's glob walks into every run folder: half of `ls`'s own time at 200 runs)."""
    with os.scandir(root) as entries:
        folders = [e.path for e in entries if e.is_dir()]
    return [
        meta for meta in (os.path.join(f, layout.META) for f in folders) if os.path.isfile(meta)
    ]


class RunStore:
    """A folder of runs, local or any fsspec URL. Creating a run checks the folder is writable."""

    def __init__(self, root: str | os.PathLike[str] | Location | None = None) -> None:
        try:
            self.loc = Location.of(root if root is not None else default_store())
        except LocationError as exc:
            raise StoreError(str(exc)) from exc
        # what messages name: the folder (a Path, as before) or the URL
        self.root: Path | str = self.loc.as_path() if self.loc.local else self.loc.url

    @property
    def local(self) -> bool:
        return self.loc.local

    def new_run(self, name: str, **meta: Any) -> Path:
        """A new run folder with its meta.json; a taken id draws another one. For a remote
        store the folder is a local stage (`stage_root()`), which `store.ship.Shipper` copies
        to `self.loc / run_id`; the meta says where (`store`)."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = self.loc.as_path() if self.local else stage_root()
        if not self.local:
            meta = {"store": self.loc.url, **meta}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for _ in range(100):
                run_id = f"{safe}-{stamp}-{secrets.token_hex(2)}"
                run_dir = folder / run_id
                try:
                    run_dir.mkdir()
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"no free run id for {safe}-{stamp}")
            write_json_atomic(
                run_dir / layout.META,
                {"run_id": run_id, "name": name, "schema_version": SCHEMA_VERSION, **meta},
            )
        except OSError as exc:
            raise StoreError(f"cannot write to the store {folder}: {exc.strerror or exc}") from exc
        if not self.local:
            from tpuscope.store.ship import start_shipping

            start_shipping(run_dir, self.loc / run_id)
        return run_dir

    def close_run(self, run_dir: Path | Location) -> Path | Location:
        """Where the run now is: for an object store, after its last batch, merged parts and
        files arrived (the stage is then removed), or the stage kept when they could not.
        A run already in the store (a pod's host, shipped before its analysis) is where it is."""
        if self.local or isinstance(run_dir, Location):  # no stage: no shipper (nor pyarrow)
            return run_dir
        from tpuscope.store.ship import finish_shipping

        return finish_shipping(run_dir)

    def run_dirs(self) -> Iterator[Location]:
        """Every run folder (one holding a meta.json)."""
        try:
            metas = (
                _local_metas(self.loc.path)
                if self.local
                else self.loc.fs.glob(f"{self.loc.path}/*/{layout.META}")
            )
        except (FileNotFoundError, NotADirectoryError):
            return iter(())
        except OSError as exc:
            raise StoreError(f"cannot list the store {self.root}: {exc.strerror or exc}") from exc
        return (Location(self.loc.fs, str(m).rsplit("/", 1)[0]) for m in sorted(metas))

    def list_runs(self, warn: list[str] | None = None) -> list[dict[str, Any]]:
        """Every readable run's meta, newest first; a run whose meta.json cannot be read is
        left out and named in `warn` (or on stderr)."""

        def read(path: Location) -> dict[str, Any] | str:
            try:
                return read_meta(path)
            except StoreError as exc:
                return f"skipped a run: {exc}"

        dirs = list(self.run_dirs())
        if self.local or len(dirs) < 2:
            results = [read(d) for d in dirs]
        else:  # an object store: a few requests per run, answered in parallel
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=8) as pool:
                results = list(pool.map(read, dirs))
        for result in results:
            if isinstance(result, str):
                _warn(warn, result)
        metas = [r for r in results if isinstance(r, dict)]
        return sorted(metas, key=lambda m: m.get("start_ns") or 0, reverse=True)

    def _run(self, run_id: str) -> Path | Location:
        loc = self.loc / run_id
        return loc.as_path() if loc.local else loc

    def resolve(self, run: str | os.PathLike[str]) -> Path | Location:
        """A run id (or unique prefix, or 'latest') in this store, or a path to a run folder
        (a Path for a local run, a Location for one in an object store)."""
        text = str(run)
        if "://" in text and not is_valid_run_id(text):
            loc = Location.of(text)
            if (loc / layout.META).is_file():
                return loc.as_path() if loc.local else loc
            raise StoreError(f"no run at {text}")
        as_path = Path(text)
        if (as_path / layout.META).is_file() and (os.sep in text or not is_valid_run_id(text)):
            return as_path
        if text == "latest":
            runs = self.list_runs()
            if not runs:
                raise StoreError(f"no runs in the store {self.root}")
            return self._run(runs[0]["run_id"])  # the folder's name (read_meta)
        if not is_valid_run_id(text):
            raise StoreError(f"not a valid run id: {text!r}")
        if (self.loc / text / layout.META).is_file():
            return self._run(text)
        matches = [p for p in self.run_dirs() if p.name.startswith(text)]
        if len(matches) == 1:
            return self._run(matches[0].name)
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
