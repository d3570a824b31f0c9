"""Parse XLA HLO text (dumps, `as_hlo_text()`, TPU trace op names) into modules and instructions.

What the TensorCore analysis needs from a graph is in its text: every instruction's
opcode, result shape and operands, the dimension numbers of `dot` and
`convolution`, which fusion an instruction was fused into, and the metadata that
`XLA_HLO_DEBUG=1` (torch_xla) or jax's tracing puts there (op_type, op_name,
source_file, source_line). XLA's own parser lives in C++ behind jaxlib, which a
torch_xla user may not have and which returns no Python objects per instruction, so
this is a small line parser. It accepts both spellings in the wild: operands with
inline shapes (`dot(f32[20,30]{1,0} %p3, ...)`, older dumps and TPU traces) and bare
names (`dot(%reshape.114, %transpose.66)`, current XLA, resolved from their
definitions), with or without `%`, and TPU layouts such as `{3,2,1,0:T(8,128)S(1)}`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_HEADER = re.compile(r"^HloModule\s+([^\s,]+)")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*(\(.*\)\s*->.*)?\{\s*$")
_SHAPE = re.compile(r"^([a-z][a-z0-9]*)\[([0-9,\s]*)\]")
_METADATA = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|([^\s}]+))')
# /*index=5*/: HLO text numbers every fifth tuple element and operand
_COMMENT = re.compile(r"/\*.*?\*/")
_OPERAND_NAME = re.compile(r"%?([\w.\-]+)$")
_DTYPE_BYTES = {
    "pred": 1,
    "s4": 0.5,
    "u4": 0.5,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "s32": 4,
    "u32": 4,
    "s64": 8,
    "u64": 8,
    "f16": 2,
    "bf16": 2,
    "f32": 4,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3b11fnuz": 1,
    "f8e4m3fnuz": 1,
    "f8e5m2fnuz": 1,
    "token": 0,
}
# Instructions that move no data of their own: their values are already in memory or are
# views of other buffers. The module traffic estimate (parse/hlo_rows) and the op cost model
# (analyze/cost_model) both read this set. `iota` is not in it: it reads nothing but writes its
# result (XLA's own cost analysis counts those bytes), and one left unfused in optimized HLO
# runs as its own kernel.
NO_TRAFFIC_OPCODES = frozenset(
    {
        "parameter",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "constant",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "add-dependency",
    }
)
_CALL_ATTRS = (
    "calls",
    "to_apply",
    "body",
    "condition",
    "branch_computations",
    "called_computations",
)


class HloParseError(ValueError):
    """Text that is not HLO; the message names the line."""


@dataclass
class HloShape:
    """An HLO instruction's shape ('f32[16,128,64]'); tuples keep their elements. Stored
    argument shapes, whose dims may be unknown, are analyze.shapes.Shape. `layout`: its
    minor-to-major dims where the text gives them ('{2,3,1,0:T(8,128)}' -> (2, 3, 1, 0)): on a
    TPU the first is the lane axis of its tiles."""

    dtype: str
    dims: tuple[int, ...] = ()
    elements: list[HloShape] = field(default_factory=list)
    layout: tuple[int, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(e) for e in self.elements) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"

    @property
    def bytes(self) -> float:
        if self.is_tuple:
            return sum(e.bytes for e in self.elements)
        size = 1
        for dim in self.dims:
            size *= dim
        return size * _DTYPE_BYTES.get(self.dtype, 4)


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: HloShape
    operands: list[str]
    operand_shapes: list[HloShape | None]
    attrs: dict[str, str]
    computation: str
    is_root: bool = False
    fusion: str | None = None  # the fusion instruction whose computation holds this one (outermost)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def moves_no_data(self) -> bool:
        """An instruction whose values are already in memory or views of others
        (NO_TRAFFIC_OPCODES)."""
        return self.opcode in NO_TRAFFIC_OPCODES

    @property
    def source_line(self) -> int | None:
        line = self.metadata.get("source_line")
        return int(line) if line and line.isdigit() else None


@dataclass
class Computation:
    name: str
    is_entry: bool
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class HloModule:
    name: str
    computations: list[Computation] = field(default_factory=list)
    source: str = ""  # the file (or trace) it came from
    stage: str = ""  # before_optimizations, after_optimizations, ... (from the dump file name)

    @property
    def entry(self) -> Computation | None:
        return next(
            (c for c in self.computations if c.is_entry),
            self.computations[-1] if self.computations else None,
        )

    def instructions(self) -> Iterator[Instruction]:
        for computation in self.computations:
            yield from computation.instructions


def read_shape(text: str) -> tuple[HloShape | None, int]:
    """The shape at the start of text and the characters it used (layouts skipped); a
    tokenizer step of the instruction parser (analyze.shapes.parse_shape reads stored ones)."""
    text_len = len(text)
    if text.startswith("("):
        close = _matching(text, 0)
        parts = [_COMMENT.sub("", p).strip() for p in split_top(text[1:close])]
        elements = [s for s in (read_shape(p)[0] for p in parts if p) if s is not None]
        return HloShape("tuple", elements=elements), close + 1
    match = _SHAPE.match(text)
    if match is None:
        return None, 0
    dims = tuple(int(d) for d in match[2].replace(" ", "").split(",") if d)
    end = match.end()
    layout: tuple[int, ...] = ()
    if end < text_len and text[end] == "{":
        close = _matching(text, end)
        layout = _minor_to_major(text[end + 1 : close], len(dims))
        end = close + 1
    return HloShape(match[1], dims, layout=layout), end


def _minor_to_major(text: str, rank: int) -> tuple[int, ...]:
    """A layout's dim order ('2,3,1,0:T(8,128)(2,1)S(1)' -> (2, 3, 1, 0)); () when it is not a
    permutation of the shape's dims."""
    order = text.split(":", 1)[0].replace(" ", "")
    dims = tuple(int(d) for d in order.split(",") if d.isdigit())
    return dims if sorted(dims) == list(range(rank)) and rank else ()


def _unquoted(text: str, start: int = 0):
    """(index, char, depth) of each character outside "quoted strings", from start on;
    depth counts the brackets open before the character (a closing one already counted)."""
    depth, quote, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        yield i, ch, depth


def _matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at text[start]; quotes are skipped."""
    for i, ch, depth in _unquoted(text, start):
        if depth == 0 and ch in ")]}":
            return i
    raise HloParseError(f"unbalanced bracket in {text[start : start + 80]!r}")


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    parts, begin = [], 0
    for i, ch, depth in _unquoted(text):
        if ch == "," and depth == 0:
            parts.append(text[begin:i].strip())
            begin = i + 1
    parts.append(text[begin:].strip())
    return parts


def parse_instruction(line: str, computation: str = "") -> Instruction:
    """One instruction line: `[ROOT] %name = shape opcode(operands), attr=value, ...`."""
    text = line.strip()
    is_root = text.startswith("ROOT ")
    if is_root:
        text = text[5:].lstrip()
    name, eq, rest = text.partition(" = ")
    if not eq:
        raise HloParseError(f"not an HLO instruction: {line.strip()[:120]!r}")
    shape, used = read_shape(rest)
    if shape is None:
        raise HloParseError(f"no result shape in: {line.strip()[:120]!r}")
    rest = rest[used:].lstrip()
    paren = rest.find("(")
    if paren <= 0:
        raise HloParseError(f"no opcode in: {line.strip()[:120]!r}")
    opcode = rest[:paren].strip()
    close = _matching(rest, paren)
    operands, shapes = _operands(rest[paren + 1 : close], opcode)
    attrs = {}
    for part in split_top(rest[close + 1 :].lstrip(", ")):
        key, _, value = part.partition("=")
        if key:
            attrs[key.strip()] = value.strip()
    metadata = {
        m[1]: m[2] if m[2] is not None else m[3]
        for m in _METADATA.finditer(attrs.get("metadata", ""))
    }
    return Instruction(
        name.lstrip("%"),
        opcode,
        shape,
        operands,
        shapes,
        attrs,
        computation,
        is_root,
        metadata=metadata,
    )


def _operands(text: str, opcode: str) -> tuple[list[str], list[HloShape | None]]:
    if opcode in ("constant", "parameter", "iota") or not text.strip():
        return [], []
    names, shapes = [], []
    for part in split_top(text):
        part = _COMMENT.sub("", part).strip()
        shape, used = read_shape(part)
        match = _OPERAND_NAME.search(part[used:].strip())
        if match:
            names.append(match[1])
            shapes.append(shape)
    return names, shapes


def parse_module(text: str, source: str = "", stage: str = "") -> HloModule:
    """One HLO module's text (the first module if several are concatenated)."""
    modules = parse_modules(text, source, stage)
    if not modules:
        raise HloParseError(f"{source or 'text'}: no 'HloModule' header or computation found")
    return modules[0]


def parse_modules(text: str, source: str = "", stage: str = "") -> list[HloModule]:
    """Every module in the text; instructions get resolved operand shapes and fusion membership."""
    modules: list[HloModule] = []
    current: Computation | None = None
    pending, start = "", 0  # an instruction whose attributes run on over lines, its first line
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        header = _HEADER.match(stripped)
        if header:
            modules.append(HloModule(header[1], source=source, stage=stage))
            current = None
            continue
        if current is None:
            match = _COMPUTATION.match(stripped)
            if match:
                if not modules:
                    modules.append(HloModule(match[2], source=source, stage=stage))
                current = Computation(match[2], bool(match[1]))
                modules[-1].computations.append(current)
            continue
        if stripped == "}" and not pending:
            current = None
            continue
        pending = f"{pending}\n{stripped}" if pending else stripped
        start = start or number
        if _open_braces(pending) > 0:  # an attribute spans lines (a kernel's JSON metadata)
            continue
        try:
            current.instructions.append(parse_instruction(pending, current.name))
        except HloParseError as exc:
            raise HloParseError(f"{source or 'text'}:{start}: {exc}") from None
        pending, start = "", 0
    for module in modules:
        _resolve(module)
    return modules


def _open_braces(text: str) -> int:
    """Braces opened and not closed in `text`, outside its quoted strings."""
    depth, quoted, escaped = 0, False, False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = quoted
        elif char == '"':
            quoted = not quoted
        elif not quoted:
            depth += (char == "{") - (char == "}")
    return depth


def _resolve(module: HloModule) -> None:
    """Fill operand shapes from their definitions and mark instructions inside fusions."""
    by_name = {i.name: i for i in module.instructions()}
    for inst in module.instructions():
        inst.operand_shapes = [
            s if s is not None else (by_name[n].shape if n in by_name else None)
            for n, s in zip(inst.operands, inst.operand_shapes, strict=True)
        ]
    computations = {c.name: c for c in module.computations}
    for inst in module.instructions():
        if inst.opcode == "fusion" and inst.fusion is None:
            _mark_fusion(computations, called(inst), inst.name, set())


def called(inst: Instruction) -> list[str]:
    """Names of the computations an instruction calls (fusion bodies, reducers, loops)."""
    names = []
    for key in _CALL_ATTRS:
        value = inst.attrs.get(key)
        if value:
            names += [v.strip().lstrip("%") for v in value.strip("{}").split(",") if v.strip()]
    return names


def _mark_fusion(
    computations: dict[str, Computation], names: list[str], fusion: str, seen: set[str]
) -> None:
    for name in names:
        computation = computations.get(name)
        if computation is None or name in seen:
            continue
        seen.add(name)
        for inst in computation.instructions:
            inst.fusion = fusion
            _mark_fusion(computations, called(inst), fusion, seen)


_DUMP_NAME = re.compile(r"^module_(\d+)\.(.+?)\.((?:[a-z]+_)?(?:before|after)_optimizations)\.txt$")


def dump_files(
    folder: str | Path, stages: tuple[str, ...] = ("before_optimizations",)
) -> list[Path]:
    """Module text files of an `--xla_dump_to` folder for the given stages, in module order.

    The CPU backend spells the optimized stage `cpu_after_optimizations`; a stage
    'after_optimizations' matches any backend's prefix.
    """
    found = []
    for path in Path(folder).glob("module_*.txt"):
        match = _DUMP_NAME.match(path.name)
        if match and any(match[3] == s or match[3].endswith("_" + s) for s in stages):
            found.append((int(match[1]), match[3], path))
    return [p for _, _, p in sorted(found, key=lambda t: (t[0], t[1]))]


def dump_stage(path: str | Path) -> str:
    match = _DUMP_NAME.match(Path(path).name)
    return match[3] if match else ""


def read_dump(path: str | Path) -> HloModule:
    """A module from one dump file; HloParseError names the file and line."""
    path = Path(path)
    return parse_module(path.read_text(errors="replace"), source=str(path), stage=dump_stage(path))
