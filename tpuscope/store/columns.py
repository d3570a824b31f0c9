"""The column forms a writer accepts besides plain lists: `Repeat` (one value for a whole
chunk) and `Coded` (integer codes into names). They live apart from both the buffer that
holds them and the part writer that converts them, so neither imports the other for them;
nothing heavy is imported here (a profiled process loads it at start-up).
"""

from __future__ import annotations

from typing import Any


class Repeat:
    """A column of one value repeated (a chunk's host, pid, rank): converted once per chunk
    when written (store/parts), not once per row."""

    __slots__ = ("count", "value")

    def __init__(self, value: Any, count: int) -> None:
        self.value, self.count = value, count

    def __len__(self) -> int:
        return self.count


class Coded:
    """A string column given as integer codes into `names` (a numpy array of codes, from a
    collector's flush): converted into a dictionary array of the names used, so the strings
    are never converted one per row (store/parts)."""

    __slots__ = ("codes", "names")

    def __init__(self, codes: Any, names: Any) -> None:
        self.codes, self.names = codes, names

    def __len__(self) -> int:
        return len(self.codes)


# a column: a list of values, a numpy array (converted without a Python loop), a Repeat or a Coded
Columns = dict[str, "list[Any] | Repeat | Coded | Any"]
