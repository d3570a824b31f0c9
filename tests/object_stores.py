"""Real object-store API servers on loopback, started and stopped by fixtures.

GCS: `gcp-storage-emulator` (gcsfs honours STORAGE_EMULATOR_HOST; recent gcsfs first probes
the bucket layout over gRPC, which the emulator does not speak and which then waits 60 s
per call, so GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false turns the probe off). S3: moto's
server (s3fs through botocore's own AWS_ENDPOINT_URL_S3, with throwaway keys). Nothing
of fsspec is mocked: tpuscope talks HTTP to these servers as it would to the clouds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {what} server exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the {what} server did not listen on {port} within {timeout} s")


@dataclass
class ObjectStore:
    """A running server: the environment that points clients at it, and a bucket in it."""

    scheme: str
    env: dict[str, str]
    bucket: str

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://{self.bucket}/{prefix}"

    def filesystem(self):  # noqa: ANN201 (an fsspec filesystem)
        import fsspec

        os.environ.update(self.env)
        return fsspec.filesystem(self.scheme, skip_instance_cache=True)


def _serve(argv: list[str], port: int, what: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port, proc, what)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


GCS_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def gcs_emulator(bucket: str = "tpuscope-test") -> Iterator[ObjectStore]:
    """A `gcp-storage-emulator` server on a free loopback port, with `bucket` made; stopped on
    exit. The tests' fixture and benchmarks/store_scale.py both start it here."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "gcp_storage_emulator",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--in-memory",
    ]
    for _ in _serve(argv, port, "GCS emulator"):
        store = ObjectStore(
            "gs", {**GCS_ENV, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}"}, bucket
        )
        store.filesystem().mkdir(store.bucket)
        yield store


@pytest.fixture(scope="session")
def gcs_store() -> Iterator[ObjectStore]:
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    with gcs_emulator() as store:
        yield store


@pytest.fixture(scope="session")
def s3_store() -> Iterator[ObjectStore]:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    for _ in _serve(argv, port, "S3 (moto)"):
        store = ObjectStore(
            "s3", {**S3_KEYS, "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}, "tpuscope-test"
        )
        store.filesystem().mkdir(store.bucket)
        yield store
