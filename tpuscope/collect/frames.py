"""The user's frame: the line every location in a run points at, for every backend.

A location is the innermost Python frame that is the user's code (tpuscope/user_files.py:
not an installed package, not the standard library, not tpuscope itself). A host read
inside `model.generate(...)` is then located at the user's `generate` line, and the library frame that did the read
(`transformers/generation/utils.py:2480`) is kept beside it, so the report can say
"generate() reads a value per token" rather than point into transformers.
"""

from __future__ import annotations

from types import FrameType

from tpuscope.user_files import (
    LIBRARY,
    USER,
    frame_kind,
    import_path,
    is_user_file,
    kind_table,
)

__all__ = ["import_path", "is_user_file", "user_and_library", "user_frames", "frame_location"]


def frame_location(frame: FrameType | None) -> str | None:
    """'file:line' of the innermost user frame from `frame` outwards (None if there is none)."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_and_library(
    frame: FrameType | None, skip: tuple[str, ...] = ()
) -> tuple[str | None, str | None]:
    """(the user's 'file:line', the innermost library frame inside that call or None).

    The library frame is the innermost frame that is neither the user's, plumbing
    (tpuscope, stdlib) nor in a package named in `skip` (e.g. jax's own internals,
    for an eager primitive whose caller is always jax); None when the user called
    the framework directly."""
    library, kinds = None, kind_table(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        kind = kinds.get(filename)
        if kind is None:
            kind = kinds[filename] = frame_kind(filename, skip)
        if kind == USER:
            return f"{filename}:{frame.f_lineno}", library
        if library is None and kind == LIBRARY:
            library = f"{import_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None, library


def user_frames(frame: FrameType | None, limit: int = 8) -> list[str]:
    """The user's frames from `frame` outwards, as 'func (file:line)' like PT_XLA_DEBUG's."""
    out: list[str] = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        if is_user_file(code.co_filename):
            out.append(f"{code.co_name} ({code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    return out
