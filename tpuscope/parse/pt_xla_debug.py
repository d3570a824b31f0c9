"""Parse PT_XLA_DEBUG text (compilation/execution analysis) into plain records.

torch_xla writes this text itself (PT_XLA_DEBUG_LEVEL>=1, to PT_XLA_DEBUG_FILE or
stderr). No library parses it, so this small line parser does. It accepts the
current wording ("user torch_xla.sync") and older ones ("user mark_step",
"mark_step in parallel loader at step end"), stacks cut with "..........", and the
`pt-xla-profiler:` auto-metrics lines of older releases.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tpuscope.schema_rows import CompileSizes, SizeColumn
from tpuscope.user_files import is_user_file

_PREFIXES = {
    "Compilation Analysis:": "compile",
    "Post Compilation Analysis:": "post",
    "Execution Analysis:": "execute",
}
_FRAME = re.compile(r"^\s*(?P<func>\S.*?) \((?P<file>.+):(?P<line>\d+)\)\s*$")
_SIZE = re.compile(r"^(?P<what>[A-Za-z ]+?) size: (?P<gb>[0-9.]+) GB")
_SIZE_FIELDS: dict[str, SizeColumn] = {
    "Graph input": "input_gb",
    "Graph output": "output_gb",
    "Aliased Input": "aliased_gb",
    "Intermediate tensor": "intermediate_gb",
    "Compiled program": "program_gb",
}


@dataclass
class GraphRecord:
    """One compilation or execution analysis block."""

    kind: str  # "compile" or "execute"
    cause: str = ""
    graph_hash: str = ""
    num_inputs: int | None = None
    num_outputs: int | None = None
    frames: list[str] = field(default_factory=list)
    sizes: CompileSizes = field(default_factory=lambda: CompileSizes())
    truncated: bool = False
    # the user's line when the frames hold none: a compiled function's backward (below)
    site: str | None = None

    @property
    def location(self) -> str | None:
        return user_location(self.frames) or self.site


def user_location(frames: list[str]) -> str | None:
    """`file:line` of the innermost frame that is the user's code (user_files.is_user_file)."""
    for frame in frames:
        match = _FRAME.match(frame)
        if match and is_user_file(match["file"]):
            return f"{match['file']}:{match['line']}"
    return None


# torch.compile's AOT autograd: its backward graphs are compiled when autograd's engine first runs
# them, on the engine's own thread for a device (XLA), whose stack reaches no user frame (it starts
# at torch/autograd/function.py's `apply`, called from C++).
_AOT = "/_functorch/_aot_autograd/"
_AUTOGRAD_FUNCTION = "/torch/autograd/function.py:"
_MAX_FORWARDS = 64


def aot_pass(frames: list[str]) -> str | None:
    """Which pass of AOT autograd a compile is in, by its frames: "backward" (`_backward_impl`),
    "forward" of a compiled function that records grads (its autograd.Function's `apply`), else
    None (an inference graph, or no torch.compile)."""
    if not any(_AOT in frame for frame in frames):
        return None
    if any(frame.startswith("_backward_impl (") and _AOT in frame for frame in frames):
        return "backward"
    if any(frame.startswith("apply (") and _AUTOGRAD_FUNCTION in frame for frame in frames):
        return "forward"
    return None


@dataclass
class DebugLog:
    """Everything parsed from one PT_XLA_DEBUG text."""

    compiles: list[GraphRecord] = field(default_factory=list)
    executions: list[GraphRecord] = field(default_factory=list)
    profiler_notes: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # lines whose number did not read


_INT64_MAX = (1 << 63) - 1


def _strip_prefix(line: str) -> tuple[str | None, str]:
    # "Post Compilation Analysis:" must be tried before "Compilation Analysis:".
    for prefix in sorted(_PREFIXES, key=len, reverse=True):
        if line.startswith(prefix):
            return _PREFIXES[prefix], line[len(prefix) :]
    return None, line


class DebugParser:
    """Incremental parser: feed text as it arrives, take finished records."""

    def __init__(self) -> None:
        self.log = DebugLog()
        self._partial = ""
        self._current: GraphRecord | None = None
        self._last_compile: GraphRecord | None = None
        self._section = ""
        self._forwards: list[str] = []  # the lines of compiled forwards, newest last

    def feed(self, text: str) -> None:
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for more text
        for line in lines:
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        if line.startswith("pt-xla-profiler:"):
            self.log.profiler_notes.append(line[len("pt-xla-profiler:") :].strip())
            return
        kind, body = _strip_prefix(line)
        if kind is None:
            return
        stripped = body.strip()
        if kind == "post":
            self._post(stripped)
            return
        if stripped.startswith("====="):
            self._open_or_close(kind)
            return
        if self._current is None:
            return
        self._body(stripped)

    def _open_or_close(self, kind: str) -> None:
        if self._current is None:
            self._current = GraphRecord(kind=kind)
            self._section = ""
            return
        record, self._current = self._current, None
        if record.kind == "compile":
            self._locate_backward(record)
            self.log.compiles.append(record)
            self._last_compile = record
        else:
            self.log.executions.append(record)

    def _locate_backward(self, record: GraphRecord) -> None:
        """A torch.compile'd function's backward graph is at the line of its forward: its compile's
        frames reach no user code (autograd's engine thread), and it recompiles when its forward
        does (a new batch size), so without this one recompile was two cards, one at no line.
        Autograd runs backwards in reverse order of their forwards: the newest forward not yet
        matched is the one (kept when it is the only one left: a recompiled forward reuses it)."""
        where = record.location
        found = aot_pass(record.frames)
        if found == "forward" and where:
            self._forwards.append(where)
            del self._forwards[:-_MAX_FORWARDS]
        elif found == "backward" and where is None and self._forwards:
            record.site = self._forwards[-1]
            if len(self._forwards) > 1 and any(
                f.startswith("extract_graph_helper (") for f in record.frames
            ):
                self._forwards.pop()  # the backward graph itself (not its inputs' sync) matched it

    def _body(self, text: str) -> None:
        record = self._current
        assert record is not None
        if text in ("Compilation Cause", "Execution Cause"):
            self._section = "cause"
        elif text.startswith("Graph Info"):
            self._section = "graph"
        elif text.startswith("Python Frame Triggered Execution"):
            self._section = "frames"
        elif text.startswith("-----"):
            self._section = ""
        elif text.startswith("Graph Hash:"):
            record.graph_hash = text.split(":", 1)[1].strip()
        elif text.startswith("Number of Graph Inputs:"):
            record.num_inputs = self._count(text)
        elif text.startswith("Number of Graph Outputs:"):
            record.num_outputs = self._count(text)
        elif self._section == "cause" and text:
            record.cause = f"{record.cause}; {text}" if record.cause else text
        elif self._section == "frames" and text:
            if set(text) == {"."}:
                record.truncated = True
            else:
                record.frames.append(text)

    def _count(self, text: str) -> int | None:
        """The number after the colon; a line that does not hold one is noted, never raised:
        this parser runs inside the program's own `torch_xla.sync()`."""
        value = text.split(":", 1)[1].strip()
        if value.isdigit() and int(value) <= _INT64_MAX:
            return int(value)
        self.log.malformed.append(text[:200])
        return None

    def _post(self, text: str) -> None:
        match = _SIZE.match(text)
        if not match or self._last_compile is None:
            return
        name = _SIZE_FIELDS.get(match["what"].strip())
        try:
            gb = float(match["gb"])
        except ValueError:  # e.g. "1.2.3 GB"
            self.log.malformed.append(text[:200])
            return
        if name:
            self._last_compile.sizes[name] = gb


def parse_debug_text(text: str) -> DebugLog:
    parser = DebugParser()
    parser.feed(text if text.endswith("\n") else text + "\n")
    return parser.log


def parse_debug_file(path: str | Path) -> DebugLog:
    return parse_debug_text(Path(path).read_text(errors="replace"))


def looks_like_debug_text(text: str) -> bool:
    return any(
        p in text for p in ("Compilation Analysis:", "Execution Analysis:", "pt-xla-profiler:")
    )


class DebugFileTail:
    """Reads what torch_xla appended to its debug file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # torch_xla keeps one debug file per process: a tail opened later (a second
        # profile() or pytest watch) reads only what comes after its start.
        self.offset = path.stat().st_size if path.exists() else 0
        self.parser = DebugParser()
        self.failed = False

    def size(self) -> int | None:
        """The file's size now (one stat, ~2 us): where the text of the step that just ended
        stops, recorded at the step so that parsing can wait for the flush thread."""
        try:
            return os.stat(self.path).st_size
        except OSError:
            return None

    def poll(self, upto: int | None = None) -> tuple[list[GraphRecord], list[GraphRecord]]:
        """New (compiles, executions) since the last poll (up to byte `upto`, else to the end);
        never raises (it may run inside the program's step): a failure stops the tail with
        one line on stderr."""
        if self.failed:
            return [], []
        try:
            return self._poll(upto)
        except Exception as exc:
            self.failed = True
            print(
                f"tpuscope: stopped reading {self.path}: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return [], []

    def _poll(self, upto: int | None) -> tuple[list[GraphRecord], list[GraphRecord]]:
        try:
            end = os.stat(self.path).st_size if upto is None else upto
            if end > self.offset:  # most steps add nothing: skip the open
                with open(self.path, "rb") as handle:
                    handle.seek(self.offset)
                    data = handle.read(end - self.offset)
            else:
                data = b""
        except FileNotFoundError:
            return [], []
        if data:
            self.offset += len(data)
            self.parser.feed(data.decode("utf-8", errors="replace"))
        log = self.parser.log
        compiles, executions = log.compiles, log.executions
        log.compiles, log.executions = [], []
        return compiles, executions
