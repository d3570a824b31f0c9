"""Where a store or a run lives: a local folder or any fsspec URL (gs://, s3://, file://).

Every read and write of the store goes through a `Location` (an fsspec filesystem and a
path on it), so the same code serves a plain folder and an object store. Credentials come
from where each filesystem looks by itself (Application Default Credentials for gcsfs,
the AWS environment and profiles for s3fs, fsspec's own `FSSPEC_<PROTOCOL>_<OPTION>`
variables); tpuscope keeps no secrets of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

_PROTOCOL_PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "s3": "s3fs",
    "s3a": "s3fs",
    "az": "adlfs",
    "abfs": "adlfs",
}


class LocationError(Exception):
    """A store URL that cannot be opened (unknown scheme, missing filesystem package)."""


@dataclass(frozen=True)
class Entry:
    """One file of a listing: its base name, size in bytes and modification time (ns)."""

    name: str
    size: int
    mtime_ns: int


def mtime_ns(info: dict[str, Any]) -> int:
    """Modification time of an fsspec listing entry, whatever the filesystem calls it."""
    for key in ("mtime", "updated", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return int(value * 1e9)
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1e9)
        with contextlib.suppress(ValueError):
            from datetime import datetime

            return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1e9)
    return 0


@dataclass(frozen=True)
class Location:
    """A path on a filesystem; `/` joins names, as with pathlib."""

    fs: Any
    path: str

    @classmethod
    def of(cls, where: str | os.PathLike[str] | Location) -> Location:
        """A plain path, a `file://` URL or any fsspec URL (gs://bucket/runs, s3://...)."""
        if isinstance(where, Location):
            return where
        text = os.fspath(where)
        if "://" not in text:
            return cls(fsspec.filesystem("file"), os.path.abspath(text))
        try:
            fs, path = fsspec.core.url_to_fs(text)
        except ImportError as exc:
            scheme = text.split("://", 1)[0]
            package = _PROTOCOL_PACKAGES.get(scheme, f"the fsspec filesystem for {scheme}://")
            raise LocationError(
                f"cannot open {text}: install {package} (pip install 'tpuscope[remote]')"
            ) from exc
        except ValueError as exc:
            raise LocationError(f"cannot open {text}: {exc}") from exc
        return cls(fs, path.rstrip("/"))

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @property
    def url(self) -> str:
        """What a user types to name it (and what DuckDB reads through fsspec)."""
        return self.path if self.local else self.fs.unstrip_protocol(self.path)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def __truediv__(self, name: str) -> Location:
        return Location(self.fs, f"{self.path}/{name}")

    def __str__(self) -> str:
        return self.url

    def as_path(self) -> Path:
        if not self.local:
            raise LocationError(f"{self.url} is not a local folder")
        return Path(self.path)

    # -- reading ---------------------------------------------------------------------
    def is_file(self) -> bool:
        return self.fs.isfile(self.path)

    def is_dir(self) -> bool:
        return self.fs.isdir(self.path)

    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def _listing(self) -> list[dict]:
        """What is directly in this folder, with details (nothing when it is absent)."""
        try:
            return self.fs.ls(self.path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def entries(self) -> list[Entry]:
        """The files directly in this folder (none when it is absent)."""
        infos = self._listing()
        return sorted(
            (
                Entry(
                    str(i["name"]).rstrip("/").rsplit("/", 1)[-1],
                    int(i.get("size") or 0),
                    mtime_ns(i),
                )
                for i in infos
                if i.get("type") == "file"
            ),
            key=lambda e: e.name,
        )

    def folders(self) -> list[str]:
        """Names of the folders directly in this one."""
        infos = self._listing()
        return sorted(
            str(i["name"]).rstrip("/").rsplit("/", 1)[-1]
            for i in infos
            if i.get("type") == "directory"
        )

    # -- writing ---------------------------------------------------------------------
    def write_bytes_atomic(self, data: bytes, make_folder: bool = True) -> None:
        """Appear whole or not at all: a local file is renamed into place, an object is
        visible only once its upload completed (GCS, S3 and Azure all work so)."""
        if not self.local:
            self.fs.pipe_file(self.path, data)
            return
        path = Path(self.path)
        if make_folder:
            path.parent.mkdir(exist_ok=True)
        # the flush thread and the main thread may race
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def write_json_atomic(self, data: dict[str, Any], make_folder: bool = True) -> None:
        self.write_bytes_atomic(
            json.dumps(data, indent=2, default=str, sort_keys=True).encode(), make_folder
        )

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path)
