"""Per-graph input and output shapes for torch_xla compiles, from XLA's own HLO dump.

torch_xla has no Python API that returns the parameters of a graph it compiles,
and by the time a step boundary returns the graph is gone (PT_XLA_DEBUG names only
their count and total size). XLA itself can dump every module it compiles
(`--xla_dump_to`), and the first line of each
`module_NNNN.<name>.before_optimizations.txt` carries
`entry_computation_layout={(f32[8,65]{1,0}, ...)->(...)}`: every parameter's
shape in order, which is exactly what a "what changed" diff needs.

XLA dumps only when it compiles, so a cached step pays nothing. A compile pays for
the whole dump: no XLA flag keeps only the before-optimizations text (every file,
the CPU backend's LLVM IR, MLIR and object files included, is gated by the one
`DumpingEnabledForHloModule` test of xla/service/dump.cc). Measured on the CPU
backend that is a bounded share of the compile itself (docs/overhead.md, "Shapes in
the default mode"), so the dump is on in the default mode, as text only, into a
folder of this process that is emptied as it is read (a few MB per compile exist
for the moment between the compile and the step's end). An existing dump is read
and kept (`tpuscope run --deep`, or the user's own `--xla_dump_to`); a user who set
any other `--xla_dump_*` flag keeps XLA's dumping to themselves (adding a folder
would move a dump they send to stdout); TPUSCOPE_HLO_SHAPES=0 turns it off. XLA
reads XLA_FLAGS when its client starts (the first device use), which comes after
`import torch_xla`, so the flag can be added from the import hook.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tpuscope.analyze.shapes import parse_shape

ENV_DUMP_DIR = "TPUSCOPE_XLA_DUMP_DIR"  # the dump folder tpuscope (not the user) put in XLA_FLAGS
ENV_DUMP_READ = "TPUSCOPE_XLA_DUMP_READ"  # tpuscope's folder already in effect: read and empty it
ENV_SWITCH = "TPUSCOPE_HLO_SHAPES"  # "0" leaves XLA's dump off (see the module docstring)
_DUMP_FLAG = re.compile(r"--xla_dump_to[= ](\S+)")
_USER_DUMP_FLAGS = re.compile(r"--xla_dump_\w+|--xla_enable_dumping")
_MODULE_FILE = re.compile(r"^module_(\d+)\.(.+)\.before_optimizations\.txt$")
_MODULE_SUFFIX = ".before_optimizations.txt"
_COMMENT = re.compile(r"/\*.*?\*/")
_LAYOUT_KEY = "entry_computation_layout={"
_MAX_HEADER = 4 << 20  # a header line longer than 4 MB is not worth parsing


@dataclass
class ModuleShapes:
    """The parameters and results of one compiled HLO module."""

    number: int
    name: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside (), [] or {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _balanced(text: str, start: int) -> str:
    """The text inside the bracket that opens at text[start], without the brackets."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return text[start + 1 :]


def _shape_list(text: str) -> list[str]:
    """'(f32[2]{0}, s64[])' -> ['f32[2]', 's64[]']; a single shape -> [it]; tuples kept whole."""
    text = text.strip()
    if text.startswith("("):
        text = _balanced(text, 0)
    out = []
    for part in split_top_level(text):
        shape = parse_shape(part)
        out.append(str(shape) if shape is not None and not part.startswith("(") else part)
    return out


def parse_entry_layout(header: str) -> tuple[list[str], list[str]] | None:
    """Parameter and result shapes from an `HloModule ...` header line, layouts dropped."""
    at = header.find(_LAYOUT_KEY)
    if at < 0:
        return None
    body = _COMMENT.sub("", _balanced(header, at + len(_LAYOUT_KEY) - 1))
    if not body.startswith("("):
        return None
    params = _balanced(body, 0)
    rest = body[len(params) + 2 :].strip()
    results = rest[2:] if rest.startswith("->") else ""
    return _shape_list(f"({params})"), _shape_list(results)


def parse_entry_signature(text: str) -> tuple[list[str], list[str]] | None:
    """Parameter and result shapes from the `ENTRY %name (p0.1: f32[2], ...) -> (...) {` line,
    for HLO text whose header has no entry_computation_layout (older XLA, other tools)."""
    at = text.find("\nENTRY ")
    start = at + 1 if at >= 0 else (0 if text.startswith("ENTRY ") else -1)
    if start < 0:
        return None
    line = _COMMENT.sub(
        "", text[start : text.find("\n", start) if "\n" in text[start:] else len(text)]
    )
    open_at = line.find("(")
    if open_at < 0:
        return None
    params = _balanced(line, open_at)
    inputs = [part.split(":", 1)[1].strip() for part in split_top_level(params) if ":" in part]
    rest = line[open_at + len(params) + 2 :].strip()
    results = rest[2:].rsplit("{", 1)[0].strip() if rest.startswith("->") else ""
    return _shape_list(f"({', '.join(inputs)})"), _shape_list(results)


def read_header(path: Path) -> str:
    """The first line of a file (HLO headers can be long: read until the newline)."""
    chunks, size = [], 0
    with open(path, "rb") as handle:
        while size < _MAX_HEADER:
            chunk = handle.read(65536)
            if not chunk:
                break
            end = chunk.find(b"\n")
            if end >= 0:
                chunks.append(chunk[:end])
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def default_flags(folder: Path) -> str:
    """The XLA_FLAGS tpuscope adds for shapes: the dump into `folder`, as text only."""
    return f"--xla_dump_to={folder} --xla_dump_hlo_as_text"


def without_dump_flags(flags: str) -> str:
    """XLA_FLAGS less every dump flag (and its value): what a child whose dump tpuscope owns
    keeps of a caller's flags (e.g. the CPU backend's optimization level)."""
    return " ".join(
        re.sub(r"(--xla_dump_\w+|--xla_enable_dumping)(=\S*)?", " ", flags or "").split()
    )


def dump_dir_in(flags: str) -> str | None:
    match = _DUMP_FLAG.search(flags or "")
    return match.group(1) if match else None


class HloDumpShapes:
    """Reads the shapes of modules XLA dumped since the last call, oldest first."""

    def __init__(self, folder: Path, owned: bool) -> None:
        self.folder = folder
        self.owned = owned
        self._seen: set[int] = set()
        self._read: list[str] = []  # names poll() listed, for sweep() to delete

    @classmethod
    def enable(cls, folder: Path) -> tuple[HloDumpShapes | None, dict[str, str]]:
        """A reader of this process's HLO dump, or None; returns (reader, env vars set).

        An existing `--xla_dump_to` (the user's, or --deep's) is read and kept. Otherwise
        the dump is added in `folder` (text only), unless TPUSCOPE_HLO_SHAPES=0 or the user
        set another `--xla_dump_*` flag. A dump folder inherited from a parent process where
        tpuscope added it (marked by TPUSCOPE_XLA_DUMP_DIR) is replaced by this process's
        own, so each process empties only its modules.
        """
        flags = os.environ.get("XLA_FLAGS", "")
        current = dump_dir_in(flags)
        if current is not None and current == os.environ.get(
            ENV_DUMP_READ
        ):  # a watch's (launch/env.py)
            return cls(Path(current), owned=True), {}
        inherited = current is not None and current == os.environ.get(ENV_DUMP_DIR)
        if current and not inherited:
            return cls(Path(current), owned=False), {}
        if inherited and current is not None:
            flags = flags.replace(default_flags(Path(current)), "")
        if os.environ.get(ENV_SWITCH) == "0" or _USER_DUMP_FLAGS.search(flags):
            if inherited:  # the parent's folder is not this process's to fill
                os.environ["XLA_FLAGS"] = " ".join(flags.split())
                return None, {"XLA_FLAGS": os.environ["XLA_FLAGS"]}
            return None, {}
        folder.mkdir(parents=True, exist_ok=True)
        flags = f"{flags.strip()} {default_flags(folder)}".strip()
        os.environ["XLA_FLAGS"] = flags
        os.environ[ENV_DUMP_DIR] = str(folder)
        return cls(folder, owned=True), {"XLA_FLAGS": flags}

    def close(self) -> None:
        """At the session's end: an owned folder goes (what XLA wrote after the last read)."""
        if self.owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def poll(self) -> list[ModuleShapes]:
        """Modules dumped since the last poll, in XLA's module order."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        found = []
        for name in names:
            match = _MODULE_FILE.match(name)
            if not match or int(match[1]) in self._seen:
                continue
            number = int(match[1])
            self._seen.add(number)
            module = ModuleShapes(number, match[2])
            try:
                parsed = parse_entry_layout(read_header(self.folder / name))
                if parsed is None:  # an older header: the ENTRY line has the parameters
                    parsed = parse_entry_signature((self.folder / name).read_text(errors="replace"))
            except OSError:
                parsed = None
            if parsed is not None:
                module.inputs, module.outputs = parsed
            found.append(module)
        if self.owned and found:
            self._read.extend(names)
        return sorted(found, key=lambda m: m.number)

    def sweep(self) -> None:
        """Delete what poll() listed, and every file but the module texts poll() has still to
        read, so an owned dump folder never grows with the run (not even with compiles that
        are not torch_xla's, e.g. JAX's in the same process, which no step polls). The flush
        thread calls it: unlinking a compile's few hundred files (LLVM IR, MLIR and objects on
        the CPU backend) took 0.1-0.2 s of wall time on a busy disk, which the step hook must
        not wait for (docs/overhead.md)."""
        names, self._read = self._read, []
        with contextlib.suppress(OSError):
            names += [n for n in os.listdir(self.folder) if not n.endswith(_MODULE_SUFFIX)]
        self._clear(names)

    def _clear(self, names: list[str]) -> None:
        for name in names:
            path = self.folder / name
            try:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink()
            except OSError:
                continue


def pair_modules(
    num_inputs: list[int | None], modules: list[ModuleShapes]
) -> list[ModuleShapes | None]:
    """The dumped module of each compile of a step, in order.

    Usually one module per compile, in the same order. When the counts differ (XLA
    compiled something torch_xla did not report, or a dump is missing), each compile
    takes the next module whose parameter count matches PT_XLA_DEBUG's input count,
    and a compile with no such module gets None rather than someone else's shapes.
    """
    if len(modules) == len(num_inputs):
        return [
            m if n is None or n == len(m.inputs) else None
            for n, m in zip(num_inputs, modules, strict=True)
        ]
    paired: list[ModuleShapes | None] = []
    start = 0
    for n in num_inputs:
        found = next(
            (
                i
                for i in range(start, len(modules))
                if n is not None and len(modules[i].inputs) == n
            ),
            None,
        )
        paired.append(modules[found] if found is not None else None)
        start = found + 1 if found is not None else start
    return paired
