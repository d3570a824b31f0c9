"""Which source file is the user's: the rule every location in a run is judged by.

A library is known by where it is installed, not by how its path is spelled. A file is a
library's (not the user's) when it is
- tpuscope itself or the standard library (`<frozen ...>` modules included);
- under a `sys.path` entry other than the program's own folders: an install folder of any
  kind (site-packages, `pip install --target DIR` on PYTHONPATH, a framework's source
  checkout added by a `.pth`), whatever its path is called;
- a file of a distribution installed inside the program's own folder (`pip install --target .`:
  its `*.dist-info` names its top-level packages);
- in a package imported from outside every `sys.path` entry (an editable install's finder);
- for a process that reads a run it did not run (an analysis, on another machine too): under
  an install folder the run's own process named (its meta's `library_folders`, the sys.path
  entries apart from its folders: `add_program_folders`), or, on a path this machine lacks,
  whose tail is a file of a distribution installed here (`/tmp/site/flax/linen/attention.py`
  read where flax is installed elsewhere);
- spelled as an install folder (site-packages, dist-packages, `lib/pythonX.Y`) or a framework
  checkout (`/torch/`, `/jax/`, ...) when nothing above decides: a path from another machine
  (an imported trace's HLO metadata, a PT_XLA_DEBUG log).
The program's own folders are the one it started in and its script's folder (for `-m` and
`-c`, only the former). Where a file sits under both a `sys.path` entry and an own folder, the
nearer (deeper) one decides: `~/work/torch/train.py` run from `~/work` is the user's, and so
is a src layout (`PYTHONPATH=src` inside the project); a `sys.path` entry that holds an own
folder is the program's project (`PYTHONPATH=~/proj python ~/proj/scripts/train.py`). `python -c` code (`<string>`) and
`<stdin>` are the user's; other generated code (`<eval_with_key>`, dataclass methods) is not.

Cost: the collectors ask at call sites, on the program's thread, so every answer is cached
per file name; a new file costs a scan of `sys.path` (a few microseconds, string prefixes
only) and, only for a `sys.path` entry inside the program's own folder that holds
`*.dist-info` folders, one read of their top-level names per entry; a path that does not
exist (a run from another machine) costs a stat and a look for its tail under each entry.
Nothing is computed at import (a profiled process's start-up).

Path rules over this process's `sys.path`, so the file readers (parse/) and the live
collectors (collect/frames.py, which walks the frames) share them without parse/ importing
the live path.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Mapping
from typing import Any

_TPUSCOPE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib")})
_INSTALLED = ("site-packages", "dist-packages")
_FRAMEWORKS = ("/torch/", "/torch_xla/", "/torch_tpu/", "/jax/", "/jaxlib/")
_START_DIR = os.getcwd() + os.sep  # where the program started (tpuscope loads before it runs)
_USER_PSEUDO = ("<string>", "<stdin>")
_ADDED: list[str] = []  # program folders a host names (pytest's rootdir): add_program_folder
_RUN_LIBRARIES: list[
    str
] = []  # the install folders the read run's meta names (add_program_folders)


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True if code in `filename` is the user's (see the module docstring)."""
    if filename.startswith("<"):
        return filename in _USER_PSEUDO
    if filename.startswith(_TPUSCOPE_DIR) or any(m in filename for m in _INSTALLED):
        return False
    if filename.startswith(_STDLIB) or _foreign_stdlib(filename):
        return False
    if not os.path.isabs(filename):
        return not _installed_relative(filename)
    if library_root(filename) is not None:
        return False
    if _nearest(filename, _own_folders()) is not None:
        return True
    if os.path.exists(filename):
        if _in_installed_package(filename):
            return False
    elif _installed_tail(filename):
        return False
    return not any(m in filename for m in _FRAMEWORKS)


def _installed_tail(filename: str) -> bool:
    """A path this machine lacks ending in a file of a distribution installed here, inside one
    of its declared top-level packages ('.../flax/linen/attention.py', not '.../utils.py' or a
    top-level folder a wheel ships undeclared): a run made where the library was installed
    elsewhere, read here."""
    cut = filename.find(os.sep, 1)
    while cut > 0:
        tail = filename[cut + 1 :]
        if os.sep not in tail:
            return False
        top = tail.split(os.sep, 1)[0]
        for entry in _path_entries():
            if top in _installed_tops(entry) and os.path.isfile(entry + tail):
                return True
        cut = filename.find(os.sep, cut + 1)
    return False


def _in_installed_package(filename: str) -> bool:
    """A file of this machine inside a top-level package or module that a distribution
    installed in one of its ancestor folders declares ('/tmp/site/flax/linen/attention.py'
    beside '/tmp/site/flax-0.12.8.dist-info'): a library this process does not import, such as
    a run made with PYTHONPATH=/tmp/site read without it. Asked only outside the program's
    folders, where an editable install's egg-info sits beside the user's own package."""
    cut = filename.find(os.sep, 1)
    while cut > 0:
        folder = filename[: cut + 1]
        if _top_name(filename, folder) in _folder_tops(folder):
            return True
        cut = filename.find(os.sep, cut + 1)
    return False


# the standard library's backport: its `@deprecated` wrapper is a frame between torch_xla 2.9's
# `xm.mark_step` / `xm.xla_device` and their caller (warnings.deprecated, its 3.13 twin, is stdlib)
_BACKPORTS = (os.sep + "typing_extensions.py",)


@functools.lru_cache(maxsize=4096)
def is_plumbing(filename: str) -> bool:
    """Frames never worth naming as the library call: tpuscope, the standard library
    (whose folder holds site-packages in most installs: those are libraries) and its
    backport `typing_extensions` (a deprecation wrapper is no library calling)."""
    if filename.startswith(_TPUSCOPE_DIR) or filename.startswith("<"):
        return True
    if filename.endswith(_BACKPORTS):
        return True
    return filename.startswith(_STDLIB) and not any(m in filename for m in _INSTALLED)


USER, PASSED, LIBRARY = 0, 1, 2  # frame_kind's answers


@functools.lru_cache(maxsize=8192)
def frame_kind(filename: str, skip: tuple[str, ...] = ()) -> int:
    """USER (the user's file), PASSED (plumbing, or in a package named in `skip`) or LIBRARY:
    the three questions a frame walk asks of each frame, answered once per (file, skip). The
    eager-dispatch hook walks a dozen frames for each primitive of an un-jitted step, so the
    walk pays one cache lookup a frame, not three."""
    if is_user_file(filename):
        return USER
    if is_plumbing(filename) or any(s in filename for s in skip):
        return PASSED
    return LIBRARY


_KIND_TABLES: dict[tuple[str, ...], dict[str, int]] = {}


def kind_table(skip: tuple[str, ...] = ()) -> dict[str, int]:
    """frame_kind's answers for `skip` as a plain dict (file name -> kind) that a frame walk
    fills as it goes: one dict lookup a frame, where frame_kind's cache builds and hashes a key
    (the eager hook walks about ten frames for each primitive). Emptied whenever the answers
    may change: a program folder added, a run's install folders read."""
    table = _KIND_TABLES.get(skip)
    if table is None or len(table) > _KINDS_KEPT:  # a bound, as frame_kind's cache has
        table = _KIND_TABLES[skip] = {}
    return table


_KINDS_KEPT = 8192


def _forget_kinds() -> None:
    frame_kind.cache_clear()
    for table in list(_KIND_TABLES.values()):  # a hook thread may add a table meanwhile
        table.clear()


def import_path(filename: str) -> str:
    """A library file as its import path: '.../site-packages/transformers/x.py' ->
    'transformers/x.py', '/opt/keras-target/keras/src/x.py' -> 'keras/src/x.py'."""
    for marker in _INSTALLED:
        cut = filename.rfind(marker + os.sep)
        if cut >= 0:
            return filename[cut + len(marker) + 1 :]
    root = library_root(filename) if os.path.isabs(filename) else None
    return filename[len(root) :] if root else filename


@functools.lru_cache(maxsize=4096)
def library_root(filename: str) -> str | None:
    """The folder (ending in a separator) a library file is imported from, or None when
    `filename` is not in a library this process can see (its own folders, a foreign path)."""
    entry = _nearest(filename, _path_entries())
    own = _nearest(filename, _own_folders())
    if entry is None:
        return None if own is not None else _imported_package_root(filename)
    if own is not None and len(entry) < len(own):
        return None  # the program's folder, inside a broader sys.path entry
    if own is None and not any(o.startswith(entry) for o in _own_folders()):
        return entry  # an install folder apart from the program's own
    # a sys.path entry that is, is inside, or holds the program's folder (a src layout, the
    # project root of a script in its scripts/ folder): the user's code, but a distribution
    # installed there (`pip install --target .`) is not
    return entry if _top_name(filename, entry) in _installed_tops(entry) else None


def _foreign_stdlib(filename: str) -> bool:
    """'/usr/lib/python3.10/...': another machine's standard library (no `re`: start-up)."""
    cut = filename.find("/lib/python")
    return cut >= 0 and filename[cut + 11 : cut + 12].isdigit()


def _installed_relative(filename: str) -> bool:
    """A relative name that is a library's file under some sys.path entry: an HLO metadata file
    name shortened by jax_hlo_source_file_canonicalization_regex ('flax/linen/module.py');
    a name no library folder holds ('train.py') is the user's, spelled from their folder."""
    top = _top_name(filename, "")
    for entry in _path_entries():
        path = entry + filename
        installed = any(m in entry for m in _INSTALLED) or top in _installed_tops(entry)
        if installed and library_root(path) is not None and os.path.isfile(path):
            return True
    return False


def _nearest(filename: str, folders: tuple[str, ...]) -> str | None:
    """The deepest of `folders` (each ending in a separator) that holds `filename`."""
    best = None
    for folder in folders:
        if filename.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


@functools.cache
def _own_folders() -> tuple[str, ...]:
    """The folder the program started in and, for `python script.py`, the script's folder.
    sys.argv is set before site-packages load, so this is right from the first call; under
    `-m` and `-c` argv[0] is not the script named on the command line (sys.orig_argv)."""
    folders = [_START_DIR] if len(_START_DIR) > 1 else []  # not the root folder
    folders += _ADDED
    script = sys.argv[0] if sys.argv else ""
    if script in getattr(sys, "orig_argv", ())[1:] and os.path.isfile(script):
        folders.append(os.path.dirname(os.path.abspath(script)) + os.sep)
    return tuple(dict.fromkeys(folders))


def add_program_folder(folder: str) -> None:
    """Count `folder` as the program's own: under pytest the program is the test suite, whose
    folders pytest puts on sys.path (rootdir-relative) whatever folder it was started in."""
    path = os.path.abspath(folder) + os.sep
    if path not in _ADDED and len(path) > 1 and len(_ADDED) < 64:
        _ADDED.append(path)
        for cached in (_own_folders, is_user_file, library_root):
            cached.cache_clear()
        _forget_kinds()


def library_folders() -> list[str]:
    """This process's install folders (what a run's meta keeps, so that a reader elsewhere
    knows its libraries): its sys.path entries but the standard library's, tpuscope's, and
    those that are, hold or sit in its own folders, unless distributions are installed there
    (`pip install --target ./libs` on PYTHONPATH)."""
    own = _own_folders()
    return [
        entry
        for entry in _path_entries()
        if entry not in _RUN_LIBRARIES
        and not entry.startswith(_TPUSCOPE_DIR)
        and not (entry.startswith(_STDLIB) and not any(m in entry for m in _INSTALLED))
        and os.path.isdir(entry)
        and (
            not any(o.startswith(entry) or entry.startswith(o) for o in own)
            or bool(_installed_tops(entry))
        )
    ]


def add_program_folders(meta: Mapping[str, Any]) -> None:
    """The folders of the program a run's meta names (the folder it started in, its script's
    folder) and its install folders, for a process that reads the run but did not run it: the
    launcher ingesting the HLO dumps' stacks, an analysis. Its own sys.path (PYTHONPATH) still
    tells the libraries too."""
    sources = [meta, *(meta.get("processes") or [])]
    _set_run_libraries([f for source in sources for f in source.get("library_folders") or []])
    for source in sources:
        cwd = source.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            continue
        add_program_folder(cwd)
        for arg in source.get("argv") or []:
            if arg in ("-m", "-c") or not isinstance(arg, str):
                break
            if arg.endswith(".py"):
                add_program_folder(os.path.dirname(os.path.join(cwd, arg)))
                break


def _set_run_libraries(folders: list[Any]) -> None:
    """The read run's install folders count as install folders here (those of a run read
    before do not: a dashboard reads many runs)."""
    global _ENTRIES
    paths = [
        os.path.join(os.path.abspath(f), "")
        for f in folders
        if isinstance(f, str) and os.path.isabs(f) and os.path.abspath(f) != os.sep
    ]
    paths = list(dict.fromkeys(paths))[:64]
    if paths != _RUN_LIBRARIES:
        _RUN_LIBRARIES[:] = paths
        _ENTRIES = ((), ())
        for cached in (is_user_file, library_root):
            cached.cache_clear()
        _forget_kinds()


_ENTRIES: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _path_entries() -> tuple[str, ...]:
    """sys.path's folders, absolute and ending in a separator (re-read when sys.path changes;
    tpuscope's own sitecustomize folder is plumbing, not a library)."""
    global _ENTRIES
    now = tuple(sys.path)
    if now != _ENTRIES[0]:
        folders = (os.path.abspath(p or os.curdir) + os.sep for p in now if isinstance(p, str))
        entries = [f for f in folders if f != os.sep] + _RUN_LIBRARIES
        _ENTRIES = (now, tuple(dict.fromkeys(entries)))
    return _ENTRIES[1]


def _top_name(filename: str, entry: str) -> str:
    """The top-level package (or module) name of `filename` under `entry`."""
    top = filename[len(entry) :].split(os.sep, 1)[0]
    return top[:-3] if top.endswith(".py") else top


@functools.lru_cache(maxsize=64)
def _installed_tops(entry: str) -> frozenset[str]:
    """Top-level names of the distributions installed in `entry` (their *.dist-info):
    top_level.txt where the wheel has one, else the first folders of its RECORD."""
    return _distribution_tops(entry)


@functools.lru_cache(maxsize=256)
def _folder_tops(folder: str) -> frozenset[str]:
    """_installed_tops of a file's ancestor folder (_in_installed_package), cached apart: a
    walk up many folders must not push sys.path's entries out of their cache (listing a
    site-packages' distributions takes a few hundred ms)."""
    return _distribution_tops(folder)


def _distribution_tops(entry: str) -> frozenset[str]:
    """The top-level names the distributions installed in `entry` declare (uncached)."""
    try:
        if not any(n.endswith((".dist-info", ".egg-info")) for n in os.listdir(entry)):
            return frozenset()
        from importlib import metadata

        tops: set[str] = set()
        for dist in metadata.distributions(path=[entry]):
            listed = dist.read_text("top_level.txt")
            if listed:
                tops.update(line.strip() for line in listed.splitlines() if line.strip())
                continue
            for file in dist.files or ():
                first = file.parts[0] if file.parts else ""
                if first and first != ".." and not first.endswith((".dist-info", ".egg-info")):
                    tops.add(first[:-3] if first.endswith(".py") else first)
        return frozenset(tops)
    except (OSError, ValueError):
        return frozenset()


def _imported_package_root(filename: str) -> str | None:
    """The folder holding the top-level package `filename` belongs to, when that package was
    imported from outside every sys.path entry (an editable install's import hook)."""
    folder = os.path.dirname(filename)
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        module = sys.modules.get(os.path.basename(folder))
        paths = getattr(module, "__path__", None)
        if paths is not None and parent not in ("", os.sep):
            try:
                if folder in (os.path.abspath(p) for p in paths):
                    return parent + os.sep
            except TypeError:
                return None
        folder = parent
