"""Build xplane_jit's decoder ahead of time into a plain extension module (numba.pycc), and
find it.

Why ahead of time: a numba JIT decoder costs every process that reads a big trace ~0.5-1.3 s
of CPU and ~130 MB of RSS just to load numba and its compiler (even with cached code), which
was most of the gap to the fastest peer (docs/benchmarks.md). The module pycc writes needs
only numpy at run time: it loads in milliseconds, and numba is imported only in the process
that builds it, once per install (or per numpy / decoder version).

    python -m tpuscope.parse.xplane_build            # build it where readers look (setup.sh)
    python -m tpuscope.parse.xplane_build DIR NAME   # the module NAME in DIR (a reader's child)

pycc's wrappers check neither dtypes nor strides (a wrong array is read as raw memory), so
xplane_jit only ever passes the arrays these signatures name, C-contiguous where they say C.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from tpuscope.parse import xplane_jit

BUILD_TIMEOUT_S = 900
RETRY_AFTER_S = 24 * 3600  # a failed build (no compiler, a timeout) is tried again a day later
log = logging.getLogger(__name__)


def module_name() -> str:
    """The module's name: it changes with the decoder's source and this file's (its
    signatures), numpy, Python and the machine, so a module built from other code or for
    another numpy ABI is never loaded."""
    key = hashlib.sha256(Path(xplane_jit.__file__).read_bytes() + Path(__file__).read_bytes())
    key.update(f"{np.__version__} {sys.implementation.cache_tag} {platform.machine()}".encode())
    return f"_xplane_decoder_{key.hexdigest()[:16]}"


def folders() -> list[Path]:
    """Where the module is kept: beside the decoder, else the user's cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tpuscope"
    return [Path(xplane_jit.__file__).parent / "__pycache__", cache]


def module_path() -> Path | None:
    """Where the module is, or else where it would be built; None when no folder is writable."""
    found = _built()
    if found is not None:
        return found
    file = module_name() + importlib.machinery.EXTENSION_SUFFIXES[0]
    for folder in folders():
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder / file
    return None


def _built() -> Path | None:
    file = module_name() + importlib.machinery.EXTENSION_SUFFIXES[0]
    return next((f / file for f in folders() if (f / file).exists()), None)


def load(build: bool = True) -> bool:
    """Decode big lines with the compiled module from now on, building it first when it is
    missing and `build` is set (the first big trace of an install; setup.sh builds it at
    install). False when there is none: the numpy decoder reads. Call it from the main
    thread, before the decoder runs on the pool."""
    return xplane_jit.loaded() or xplane_jit.use(compiled_module(build))


def compiled_module(build: bool) -> ModuleType | None:
    """The compiled module, built first (in a child process) when missing and `build` is set;
    None when there is none."""
    found = _built()  # a reader that is not to build creates no folder either
    if found is not None:
        return _import(found)
    path = module_path() if build else None
    return _import(path) if path is not None and build_in_child(path) else None


@functools.cache
def _import(path: Path) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
    if spec is None or spec.loader is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


def build_in_child(target: Path) -> bool:
    """Build the module at target in a child process (numba stays out of the reader's); a
    failure is written beside it, so that for a day later processes do not try again."""
    failed = _failed_marker(target)
    recent = failed.exists() and time.time() - failed.stat().st_mtime < RETRY_AFTER_S
    if recent or importlib.util.find_spec("numba") is None:
        return False
    log.warning("tpuscope: compiling the trace decoder, once per install (numba.pycc)")
    root = Path(xplane_jit.__file__).resolve().parents[2]  # this tpuscope, whatever the cwd
    path = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", __name__, str(target.parent), module_name()]
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        done = subprocess.CompletedProcess(command, 1, "", str(exc))
    if done.returncode == 0 and target.exists():
        return True
    reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
    with contextlib.suppress(OSError):
        failed.write_text(reason + "\n")
    log.warning(
        "tpuscope: the trace decoder could not be compiled (%s); numpy reads "
        "(`python -m tpuscope.parse.xplane_build` tries again)",
        reason,
    )
    return False


def _failed_marker(target: Path) -> Path:
    return target.with_name(target.name.split(".")[0] + ".failed")


def build(folder: Path, name: str) -> Path:
    """Compile the module `name` into `folder`: it appears there whole or not at all (a
    concurrent build of the same name replaces it with the same code)."""
    from numba import njit, types
    from numba.pycc import CC, compiler

    class NoGil(compiler.Flags):
        """pycc has no nogil option, but it makes its wrappers as @njit(nogil=True) does, by
        create_cpython_wrapper(flags.release_gil): with it set, the reader's two worker
        threads decode side by side (without, 0.32-0.35 s wall for a 1M-event read, not 0.24)."""

        def __init__(self, *copied: compiler.Flags) -> None:
            super().__init__(*copied)
            self.release_gil = True

    compiler.Flags = NoGil  # this process only builds the module

    ns = vars(xplane_jit)  # the exported functions call these by their global names
    ns["_varint"] = njit(inline="always")(xplane_jit._varint)
    ns["_events"] = njit(xplane_jit._events)
    ns["_tail_round"] = njit(xplane_jit._tail_round)
    i64, c_i64, any_i64 = types.int64, types.Array(types.int64, 1, "C"), types.int64[:]
    data = types.Array(types.uint8, 1, "C", readonly=True)
    table = types.Array(types.bool_, 1, "C")
    stat_columns = (types.Array(types.int8, 1, "C"), types.Array(types.uint64, 1, "C"))
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
    try:
        cc = CC(name)
        cc.output_dir, cc.verbose = str(work), False
        cc.export("frame", i64(data, i64, i64, c_i64, c_i64))(xplane_jit._frame)
        decoded = types.Tuple((i64,) + (any_i64,) * 7)
        cc.export("decode", decoded(data, c_i64, c_i64, table, i64))(xplane_jit._decode)
        stats = types.Tuple((i64, c_i64, *stat_columns, c_i64, c_i64))
        cc.export("stats", stats(data, any_i64, any_i64))(xplane_jit._stats)
        cc.compile()
        (built,) = work.glob(f"{name}.*")
        target = folder / built.name
        built.replace(target)
        _failed_marker(target).unlink(missing_ok=True)
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv:
        if argv[1] != module_name():  # another tpuscope's source: its signatures may differ
            print(f"tpuscope: this decoder is {module_name()}, not {argv[1]}", file=sys.stderr)
            return 1
        print(build(Path(argv[0]), argv[1]))
        return 0
    path = module_path()
    if path is None:
        print("tpuscope: no writable folder for the compiled trace decoder", file=sys.stderr)
        return 1
    print(path if path.exists() else build(path.parent, module_name()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
