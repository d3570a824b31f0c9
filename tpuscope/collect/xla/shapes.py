"""Per-graph input and output shapes for torch_xla compiles, from XLA's own HLO dump.

torch_xla has no Python API that returns the parameters of a graph it compiles,
and by the time a step boundary returns the graph is gone. XLA itself can dump
every module it compiles (`--xla_dump_to`), and the first line of each
`module_NNNN.<name>.before_optimizations.txt` carries
`entry_computation_layout={(f32[8,65]{1,0}, ...)->(...)}`: every parameter's
shape in order, which is exactly what a "what changed" diff needs.

XLA dumps only when it compiles, so cached steps pay nothing, but a compile pays
for the whole dump (on the CPU backend that includes LLVM IR for every kernel:
measured +30-45% CPU time per compile step, docs/detectors.md). That is over the
2% budget of the default mode, so the dump is read when it exists anyway
(`tpuscope run --deep`, or the user's own `--xla_dump_to`; those files are kept)
and is added only on request (TPUSCOPE_HLO_SHAPES=1; that folder is emptied as it
is read). XLA reads XLA_FLAGS when its client starts (the first device use), which
comes after `import torch_xla`, so the flag can be added from the import hook.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tpuscope.analyze.shapes import parse_shape

ENV_DUMP_DIR = "TPUSCOPE_XLA_DUMP_DIR"  # the dump folder tpuscope (not the user) put in XLA_FLAGS
ENV_SWITCH = "TPUSCOPE_HLO_SHAPES"  # "1" adds the dump in the default mode (see the module docstring)
_DUMP_FLAG = re.compile(r"--xla_dump_to[= ](\S+)")
_MODULE_FILE = re.compile(r"^module_(\d+)\.(.+)\.before_optimizations\.txt$")
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
    line = _COMMENT.sub("", text[start : text.find("\n", start) if "\n" in text[start:] else len(text)])
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


def dump_dir_in(flags: str) -> str | None:
    match = _DUMP_FLAG.search(flags or "")
    return match.group(1) if match else None


class HloDumpShapes:
    """Reads the shapes of modules XLA dumped since the last call, oldest first."""

    def __init__(self, folder: Path, owned: bool) -> None:
        self.folder = folder
        self.owned = owned
        self._seen: set[int] = set()

    @classmethod
    def enable(cls, folder: Path) -> tuple[HloDumpShapes | None, dict[str, str]]:
        """A reader of this process's HLO dump, or None; returns (reader, env vars set).

        An existing `--xla_dump_to` (the user's, or --deep's) is read and kept. With
        TPUSCOPE_HLO_SHAPES=1 the dump is added in `folder`; a dump folder inherited
        from a parent process where tpuscope added it (marked by TPUSCOPE_XLA_DUMP_DIR)
        is replaced by this process's own, so each process empties only its modules.
        """
        flags = os.environ.get("XLA_FLAGS", "")
        current = dump_dir_in(flags)
        inherited = current is not None and current == os.environ.get(ENV_DUMP_DIR)
        if current and not inherited:
            return cls(Path(current), owned=False), {}
        if os.environ.get(ENV_SWITCH) != "1" and not inherited:
            return None, {}
        if current:
            flags = _DUMP_FLAG.sub("", flags)
        folder.mkdir(parents=True, exist_ok=True)
        flags = f"{flags.strip()} --xla_dump_to={folder} --xla_dump_hlo_as_text".strip()
        os.environ["XLA_FLAGS"] = flags
        os.environ[ENV_DUMP_DIR] = str(folder)
        return cls(folder, owned=True), {"XLA_FLAGS": flags}

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
            self._clear(names)
        return sorted(found, key=lambda m: m.number)

    def _clear(self, names: list[str]) -> None:
        """Delete what was read, so an owned dump folder never grows with the run."""
        for name in names:
            path = self.folder / name
            try:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink()
            except OSError:
                continue


def pair_modules(num_inputs: list[int | None], modules: list[ModuleShapes]) -> list[ModuleShapes | None]:
    """The dumped module of each compile of a step, in order.

    Usually one module per compile, in the same order. When the counts differ (XLA
    compiled something torch_xla did not report, or a dump is missing), each compile
    takes the next module whose parameter count matches PT_XLA_DEBUG's input count,
    and a compile with no such module gets None rather than someone else's shapes.
    """
    if len(modules) == len(num_inputs):
        return [m if n is None or n == len(m.inputs) else None
                for n, m in zip(num_inputs, modules, strict=True)]
    paired: list[ModuleShapes | None] = []
    start = 0
    for n in num_inputs:
        found = next((i for i in range(start, len(modules)) if n is not None and len(modules[i].inputs) == n),
                     None)
        paired.append(modules[found] if found is not None else None)
        start = found + 1 if found is not None else start
    return paired
