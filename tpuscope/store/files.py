"""The store's file helpers: whole JSON files written atomically or created once, read with
errors that name the file, and the error every store module raises (`StoreError`).

The lowest room of the store: it imports only `location`, so the run store, the pod joining
and the shipper all build on it without importing each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from tpuscope.store.location import Location

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


class StoreError(Exception):
    """A store or run that cannot be used; the message names it."""


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
    tmp = path.with_name(
        f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    )  # flusher and main may race
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str, sort_keys=True))
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def read_json(path: str | Path | Location) -> dict[str, Any]:
    """A JSON object from a file; {} when absent, StoreError when it is there but unreadable."""
    loc = Location.of(path)
    try:
        text = loc.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreError(f"cannot read {loc}: {exc.strerror or exc}") from exc
    return parse_json(text, loc)


def parse_json(text: str | bytes, where: object) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreError(f"{where} is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise StoreError(f"{where} does not hold a JSON object")
    return data


def json_files(folder: Location, warnings: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(name, object) of every JSON file of a folder, fetched together (one round of requests
    remotely), in name order; an unreadable one is named in `warnings` and left out."""
    paths = [(folder / e.name).path for e in folder.entries() if e.name.endswith(".json")]
    if not paths:
        return []
    try:
        blobs = folder.fs.cat(paths, on_error="return")
    except OSError as exc:
        warnings.append(f"cannot read {folder}: {exc}")
        return []
    found = []
    for path in sorted(blobs):
        blob = blobs[path]
        try:
            if isinstance(blob, BaseException):
                raise StoreError(f"cannot read {path}: {blob}")
            found.append((path.rsplit("/", 1)[-1], parse_json(blob, Location(folder.fs, path))))
        except StoreError as exc:
            warnings.append(str(exc))
    return found


def stage_root() -> Path:
    """Where runs bound for an object store are written first ($TPUSCOPE_STAGE, else the user's
    cache): the program's parts land on local disk at local speed and are shipped in batches."""
    env = os.environ.get("TPUSCOPE_STAGE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tpuscope" / "stage"


def json_bytes(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, indent=2, default=str, sort_keys=True).encode()


def create_json_once(path: Location, data: dict[str, Any]) -> bool:
    """Create a JSON file unless it exists (True when this call wrote it). fsspec's
    exclusive write where the filesystem has one; the same bytes from every host otherwise."""
    try:
        path.fs.pipe_file(path.path, json_bytes(data), mode="create")
    except FileExistsError:  # another host was first: its meta stands
        return False
    except TypeError:  # a filesystem without exclusive writes
        path.fs.pipe_file(path.path, json_bytes(data))
    return True
