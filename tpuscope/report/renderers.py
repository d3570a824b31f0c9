"""Every output of tpuscope behind one interface, picked by name: get the data, pick a renderer.

`renderer_for(subject, name)` returns the Renderer of one format of one kind of data: a run's
report (console, json), an import (json), a diff (console, json, markdown), a run's device view (console, json),
its trace (perfetto), the runs of a store (console, json), a benchmark (console, json,
markdown) and a query's rows (table, json, csv). `render(data)` returns the whole output as
text (rich formats: what the console would print) or bytes (Perfetto's gzip); `emit` writes it
where it goes. The functions behind the names load on first use, so a command pays only for
the format it prints (rich, pyarrow).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

# (subject, name) -> "module:function" and whether it draws on a rich Console
_HOMES: dict[tuple[str, str], tuple[str, bool]] = {
    ("report", "console"): ("tpuscope.report.console:render", True),
    ("report", "json"): ("tpuscope.report.json_report:report_json", False),
    ("import", "json"): ("tpuscope.report.json_report:clean_json", False),
    ("diff", "console"): ("tpuscope.report.diff:render", True),
    ("diff", "json"): ("tpuscope.report.json_report:plain_json", False),
    ("diff", "markdown"): ("tpuscope.report.diff:markdown_text", False),
    ("device", "console"): ("tpuscope.report.device:render_with_tools", True),
    ("device", "json"): ("tpuscope.report.json_report:plain_json", False),
    ("trace", "perfetto"): ("tpuscope.report.perfetto:chrome_trace", False),
    ("runs", "console"): ("tpuscope.report.runs:render", True),
    ("runs", "json"): ("tpuscope.report.json_report:plain_json", False),
    ("bench", "console"): ("tpuscope.report.bench:render", True),
    ("bench", "json"): ("tpuscope.report.bench:json_text", False),
    ("bench", "markdown"): ("tpuscope.report.bench:markdown_text", False),
    ("rows", "table"): ("tpuscope.report.rows:render", True),
    ("rows", "json"): ("tpuscope.report.rows:json_text", False),
    ("rows", "csv"): ("tpuscope.report.rows:csv_text", False),
}


class UnknownRenderer(KeyError):
    """No renderer of that name for that kind of data; the message lists the ones there are."""


@dataclass(frozen=True)
class Renderer:
    """One format of one kind of data."""

    subject: str
    name: str
    home: str  # "module:function"
    rich: bool  # the function draws on a rich Console (text formats return their whole output)

    def _function(self) -> Any:
        module, _, function = self.home.partition(":")
        return getattr(importlib.import_module(module), function)

    def render(self, data: Any, console: Console | None = None) -> str | bytes:
        """The whole output: text (a rich format: what `console` would print) or bytes."""
        if not self.rich:
            return self._function()(data)
        from rich.console import Console

        console = console or Console()
        with console.capture() as captured:
            self._function()(data, console)
        return captured.get()

    def emit(self, data: Any, console: Console | None = None) -> None:
        """Write the output where it goes: a rich format onto `console` (default stdout), text
        to stdout as it is (it ends with its own newline)."""
        if self.rich:
            from rich.console import Console

            self._function()(data, console or Console())
            return
        output = self._function()(data)
        if isinstance(output, bytes):
            sys.stdout.buffer.write(output)
        else:
            sys.stdout.write(output)
        sys.stdout.flush()

    def write(self, data: Any, path: str | Path) -> Path:
        """The output as the file `path` (its folder made), appearing whole or not at all."""
        output = self.render(data)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(output if isinstance(output, bytes) else output.encode())
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path


def renderer_for(subject: str, name: str) -> Renderer:
    """The renderer `name` of `subject` data (renderer_for("report", "json"))."""
    try:
        home, rich = _HOMES[(subject, name)]
    except KeyError:
        raise UnknownRenderer(
            f"no {name!r} renderer for {subject}; there are: {', '.join(names(subject)) or 'none'}"
        ) from None
    return Renderer(subject, name, home, rich)


def names(subject: str) -> list[str]:
    """The formats `subject` data can be rendered in."""
    return [name for kind, name in _HOMES if kind == subject]
