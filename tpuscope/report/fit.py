"""Tables that never cut an identity, at any terminal width.

A run id, a name or a `file:line` is what a user copies into the next command or opens in an
editor: cut to `train…` or folded over two lines it is useless. So a column holding one is
`whole`: never truncated or wrapped. A table whose whole columns (plus the narrowest the other
columns can wrap to) fit the width is drawn as a table; one that does not is written as
records, one block per row, printed without hard line breaks (`print_plain`), so a pipe or a CI
log gets every identity on one line and a terminal wraps it visually.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

WRAP_MIN = 10  # the narrowest a short column may wrap to before the table becomes records
LONG_MIN = 30  # the narrowest free text may wrap to (narrower, a sentence is a word a line)


@dataclass(frozen=True)
class Col:
    """One column: `whole` for an identity, `long` for free text (its own line as a record)."""

    name: str
    whole: bool = False
    long: bool = False
    justify: str = "left"


def needed_width(cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> int:
    """The width a table of `rows` needs with every whole column unbroken (box edges included)."""
    total = 3 * len(cols) + 1
    for i, col in enumerate(cols):
        cells = [str(r[i]) for r in rows] + [col.name]
        widest = max(len(c) for c in cells)
        if col.whole:
            total += widest
        else:
            total += min(widest, LONG_MIN if col.long else WRAP_MIN)
    return total


def table(
    title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], **kw: Any
) -> Table:
    """The rich table: whole columns never wrap, the others wrap at spaces (a word longer than
    its column folds: never an ellipsis)."""
    out = Table(title=title, title_justify="left", **kw)
    for i, col in enumerate(cols):
        widest = max((len(str(r[i])) for r in rows), default=0)
        out.add_column(
            col.name,
            justify=col.justify,  # type: ignore[arg-type]
            no_wrap=col.whole,
            overflow="ignore" if col.whole else "fold",
            min_width=widest if col.whole else None,
        )
    for row in rows:
        out.add_row(*(str(c) for c in row))
    return out


def records(
    title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], named: bool = False
) -> Text:
    """Each row as a block: its whole cells on the first line, the others `name value` after;
    `named`: every cell on a line of its own, `name: value` (a query's rows: no column is known)."""
    out = Text()
    if title:
        out.append(title + "\n", style="italic")
    if named:
        for i, row in enumerate(rows):
            out.append(f"-- row {i + 1}\n", style="dim")
            for c, col in zip(row, cols, strict=True):
                out.append(f"{col.name}: ", style="bold")
                out.append(f"{c}\n")
        out.rstrip()
        return out
    for row in rows:
        first = [str(c) for c, col in zip(row, cols, strict=True) if col.whole and str(c)]
        out.append("  ".join(first) or "-", style="bold")
        short = [
            f"{col.name} {c}"
            for c, col in zip(row, cols, strict=True)
            if not col.whole and not col.long and str(c) not in ("", "-")
        ]
        if short:
            out.append("\n    " + "  ".join(short))
        for c, col in zip(row, cols, strict=True):
            if col.long and str(c):
                out.append(f"\n    {col.name}: {c}")
        out.append("\n")
    out.rstrip()
    return out


def grid(
    title: str | None,
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    width: int,
    named: bool = False,
    **kw: Any,
) -> RenderableType:
    """A table when its identities fit `width` whole, else records (print them with print_plain)."""
    if needed_width(cols, rows) <= width:
        return table(title, cols, rows, **kw)
    return records(title, cols, rows, named)


def fits(renderable: RenderableType) -> bool:
    """Whether grid() drew a table (False: records, which must not be put in a box)."""
    return not isinstance(renderable, Text)


def print_plain(console: Any, renderable: RenderableType) -> None:
    """Print without hard line breaks for text (records), as a table otherwise."""
    console.print(renderable, soft_wrap=isinstance(renderable, Text))
