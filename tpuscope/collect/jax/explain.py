"""Turn JAX's `jax_explain_cache_misses` text into data: what differed, argument by argument.

With the flag on, JAX logs one "TRACING CACHE MISS" message per trace of a user
function (logger `jax._src.interpreters.partial_eval`, jax 0.4.36 to 0.10). The
text is the only place JAX says *why* it retraced, so this parser keeps every
piece of it: the call site, the function and where it is defined, and for each
difference against the closest earlier cache key its kind (input types, pytree
structure, static argument, tracing context), the argument and the before/after
values. Compile rows use `cause_text()`; the `retraces` table stores the diffs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

HEADER = "TRACING CACHE MISS"
_CALLSITE = re.compile(r"^TRACING CACHE MISS at (?P<site>.*?)(?: \((?P<func>[^()]*)\))?:\s*$")
_SITE = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?::\d+)?$")
_FOR = re.compile(r"^for (?P<func>.+?)(?: defined at (?P<defined>.+))?$")
_NEVER = re.compile(r"^(?P<func>.+?) id=\d+(?: defined at (?P<defined>.+))?$")
_TYPE_DIFF = re.compile(r"^\* at (?P<arg>.+?), now (?P<after>.+?) and before (?P<before>.+)$")
_TREE_DIFF = re.compile(
    r"^\* at input path (?P<arg>.*?), now (?P<after>.+?) and before (?P<before>.+?), so (?P<why>.+)$"
)
_CTX_DIFF = re.compile(r"^\* (?P<arg>\S+) differs: now (?P<after>.+) and before (?P<before>.+)$")
_CTX_COUNT = re.compile(r"^\* number of tracing context (?P<what>.+)$")
_STATIC = re.compile(r"Static\(val=(?P<val>.*)\)$")
_CLASS = re.compile(r"<class '(?:[\w.]+\.)?(?P<name>\w+)'>")
_WEAK_HINT = re.compile(r"https?://\S+$")

_SHARDED_DIM = re.compile(
    r"@(?:\([^)]*\)|\w+)"
)  # f32[64,128@model], f32[8@(x,y),4] -> f32[64,128], f32[8,4]
_SHARDING_SUFFIX = re.compile(r"\(\{.*\}\)$")  # f32[64,128]({Explicit: ('batch',)}) -> f32[64,128]

# Kinds of a retrace, as stored in the retraces table. input_sharding: the same dtype and
# shape with another sharding (JAX's "different input types" when only the mesh or the
# partitioning of an argument changed, or what the pmap hook saw of a pmapped call's inputs).
FIRST, REDEFINED, INPUT_TYPES, PYTREE, STATIC_ARG = (
    "first",
    "redefined",
    "input_types",
    "pytree",
    "static_arg",
)
TRACING_CONTEXT, DEBUG_INFO, UNKNOWN = "tracing_context", "debug_info", "unknown"
INPUT_SHARDING = "input_sharding"


def plain_type(text: str) -> str:
    """An aval's dtype and global shape without its sharding: 'f32[32@batch,64]({Explicit:
    ('batch',)})' -> 'f32[32,64]' (what two avals must share for a change to be sharding alone)."""
    return _SHARDED_DIM.sub("", _SHARDING_SUFFIX.sub("", text.strip()))


@dataclass
class Diff:
    """One difference between the new cache key and the closest earlier one."""

    kind: str
    arg: str | None = None
    before: str | None = None
    after: str | None = None
    detail: str | None = None


@dataclass
class Explanation:
    """One parsed TRACING CACHE MISS message."""

    function: str
    defined_at: str | None
    callsite: str | None
    kind: str
    diffs: list[Diff] = field(default_factory=list)
    text: str = ""
    time_s: float = 0.0  # when JAX logged it (the trace was running then)

    @property
    def is_retrace(self) -> bool:
        return self.kind not in (FIRST,)


def site_to_location(site: str | None) -> str | None:
    """'/a/b.py:35:10' -> '/a/b.py:35' (compile rows use file:line like torch_xla's)."""
    if not site:
        return None
    match = _SITE.match(site.strip())
    return f"{match['file']}:{match['line']}" if match else site.strip()


def parse_explanation(text: str) -> Explanation | None:
    """Parse one explanation message; None if the text is not one."""
    lines = [line.strip() for line in text.splitlines()]
    if not lines or not lines[0].startswith(HEADER):
        return None
    head = _CALLSITE.match(lines[0])
    callsite = site_to_location(head["site"]) if head else None
    body = [line for line in lines[1:] if line]
    if body and body[0].startswith("never seen function"):
        return _never_seen(body[1:], callsite, text)
    function, defined = "?", None
    if body and (match := _FOR.match(body[0])):
        function, defined = match["func"], site_to_location(match["defined"])
    diffs = _diffs(body[1:])
    kind = diffs[0].kind if diffs else UNKNOWN
    return Explanation(function, defined, callsite, kind, diffs, text)


def _never_seen(body: list[str], callsite: str | None, text: str) -> Explanation:
    function, defined = "?", None
    if body and (match := _NEVER.match(body[0])):
        function, defined = match["func"], site_to_location(match["defined"])
    redefined = any(
        "re-defined repeatedly" in line or "defined on the same line" in line for line in body
    )
    if redefined:
        diff = Diff(
            REDEFINED,
            detail="another function object was defined on the same line before: "
            "the function is re-created on every call, so jit never hits its cache",
        )
        return Explanation(function, defined, callsite, REDEFINED, [diff], text)
    return Explanation(function, defined, callsite, FIRST, [Diff(FIRST)], text)


def _diffs(lines: list[str]) -> list[Diff]:
    """The difference lines after 'For the closest previous key:'."""
    section = ""
    diffs: list[Diff] = []
    for line in lines:
        if line.startswith("all previously seen cache keys differ"):
            continue
        if line.startswith("different input types"):
            section = INPUT_TYPES
        elif line.startswith("different input pytree"):
            section = PYTREE
        elif line.startswith("Tracing context doesn't match"):
            section = TRACING_CONTEXT
            diffs.append(Diff(TRACING_CONTEXT, detail=line))
        elif line.startswith("Debug info doesn't match"):
            diffs.append(
                Diff(DEBUG_INFO, detail="argument names, keyword arguments or result paths changed")
            )
        elif line.startswith("cache miss explanation unavailable"):
            diffs.append(Diff(UNKNOWN, detail=line))
        elif line.startswith("*"):
            diff = _diff_line(section, line)
            if diff is not None:
                diffs.append(diff)
    # A context header followed by named items: keep the items, not the bare header.
    named = [d for d in diffs if d.kind == TRACING_CONTEXT and d.arg]
    if named:
        diffs = [d for d in diffs if d.kind != TRACING_CONTEXT or d.arg]
    return diffs


def _diff_line(section: str, line: str) -> Diff | None:
    if section == INPUT_TYPES and (m := _TYPE_DIFF.match(line)):
        before, after = _WEAK_HINT.sub("", m["before"]).strip(), m["after"].strip()
        sharding_only = before != after and plain_type(before) == plain_type(after)
        return Diff(INPUT_SHARDING if sharding_only else INPUT_TYPES, m["arg"], before, after)
    if section == PYTREE and (m := _TREE_DIFF.match(line)):
        before, after = m["before"], m["after"]
        static_before, static_after = _STATIC.search(before), _STATIC.search(after)
        if static_before and static_after:
            return Diff(STATIC_ARG, m["arg"], static_before["val"], static_after["val"], m["why"])
        return Diff(PYTREE, m["arg"], _short_node(before), _short_node(after), m["why"])
    if section == TRACING_CONTEXT:
        if m := _CTX_DIFF.match(line):
            return Diff(TRACING_CONTEXT, m["arg"], m["before"], m["after"])
        if m := _CTX_COUNT.match(line):
            return Diff(TRACING_CONTEXT, None, None, None, f"number of tracing context {m['what']}")
    return None


def _short_node(text: str) -> str:
    """ "<class 'dict'> with 2 children" -> "dict with 2 children"."""
    return _CLASS.sub(lambda m: m["name"], text).strip()


def cause_text(expl: Explanation | None, function: str) -> str:
    """One line for compiles.cause: what made JAX trace (and so compile) again."""
    if expl is None:
        return f"compile of {function}"
    name = expl.function if expl.function != "?" else function
    if expl.kind == FIRST:
        return f"first trace of {name}"
    if expl.kind == REDEFINED:
        return f"{name} re-defined on every call: a new function object misses the jit cache"
    parts = [_diff_text(d) for d in expl.diffs[:4]]
    more = f" (+{len(expl.diffs) - 4} more)" if len(expl.diffs) > 4 else ""
    return f"retrace of {name}: " + "; ".join(parts) + more


def _diff_text(diff: Diff) -> str:
    if diff.kind == INPUT_TYPES:
        return f"arg {diff.arg}: {diff.before} -> {diff.after}"
    if diff.kind == INPUT_SHARDING:
        return f"input sharding of {diff.arg}: {diff.before} -> {diff.after}"
    if diff.kind == STATIC_ARG:
        return f"static arg {diff.arg}: {diff.before} -> {diff.after}"
    if diff.kind == PYTREE:
        return f"input pytree at {diff.arg}: {diff.before} -> {diff.after}"
    if diff.kind == TRACING_CONTEXT:
        if diff.arg:
            return f"tracing context {diff.arg}: {diff.before} -> {diff.after}"
        return f"tracing context changed ({diff.detail})"
    if diff.kind == DEBUG_INFO:
        return f"debug info differs ({diff.detail})"
    return diff.detail or diff.kind


def aval_text(aval: Any) -> str:
    """An abstract value in HLO's notation, e.g. 'f32[4,41,128]' (as torch_xla rows use)."""
    try:
        return str(aval.str_short(short_dtypes=True))
    except (AttributeError, TypeError):
        return str(aval)
