"""Which source file is the user's: the rule every location in a run is judged by.

A file is the user's code unless it is an installed package (site-packages,
dist-packages), the standard library (`<frozen ...>` modules included) or tpuscope itself.
A framework run from a source checkout (torch, torch_xla, jax outside site-packages) is
still a library; a file under the directory the program started in is the user's even if
its path names a framework (`~/work/torch/train.py`). `python -c` code (`<string>`) and
`<stdin>` are the user's; other generated code (`<eval_with_key>`, dataclass methods) is not.

Pure path rules, so the file readers (parse/) and the live collectors (collect/frames.py,
which walks the frames) share them without parse/ importing the live path.
"""

from __future__ import annotations

import functools
import os
import sysconfig

_TPUSCOPE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib")})
_INSTALLED = ("site-packages", "dist-packages")
_FRAMEWORKS = ("/torch/", "/torch_xla/", "/torch_tpu/", "/jax/", "/jaxlib/")
_START_DIR = os.getcwd() + os.sep  # where the program started (tpuscope loads before it runs)
_USER_PSEUDO = ("<string>", "<stdin>")


@functools.lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True if code in `filename` is the user's (see the module docstring)."""
    if filename.startswith("<"):
        return filename in _USER_PSEUDO
    if filename.startswith(_TPUSCOPE_DIR) or any(m in filename for m in _INSTALLED):
        return False
    if filename.startswith(_STDLIB):
        return False
    if not os.path.isabs(filename) or filename.startswith(_START_DIR):
        return True
    return not any(m in filename for m in _FRAMEWORKS)


@functools.lru_cache(maxsize=4096)
def is_plumbing(filename: str) -> bool:
    """Frames never worth naming as the library call: tpuscope, the standard library
    (whose folder holds site-packages in most installs: those are libraries)."""
    if filename.startswith(_TPUSCOPE_DIR) or filename.startswith("<"):
        return True
    return filename.startswith(_STDLIB) and not any(m in filename for m in _INSTALLED)


def import_path(filename: str) -> str:
    """A library file as its import path: '.../site-packages/transformers/x.py' -> 'transformers/x.py'."""
    for marker in _INSTALLED:
        cut = filename.rfind(marker + os.sep)
        if cut >= 0:
            return filename[cut + len(marker) + 1 :]
    return filename
