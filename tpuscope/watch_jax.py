"""How a watch judges JAX: a jitted function compiled again after its own warm-up.

torch_xla has steps (every `torch_xla.sync()`), so its watches judge "graphs compiled
after the first N steps". A JAX test has no such boundary a watch can rely on: its
jitted functions are usually defined at the test module's import, long before the
watch starts, and calls that hit JAX's cache never leave C++, so the collector cannot
count their calls (docs/backends.md). Compiles it does see, each with the function
and why JAX traced it again. So a JAX watch has no step notion: **each jitted
function's first compile in the block is its warm-up, and every further compile of
the same function (same name and definition site) is a recompile**: a retrace (new
shapes, dtypes, pytree, static value, tracing context) or a re-definition (jitted
anew on every call). `warmup_steps=N` lets each function compile N times (e.g. two
bucket sizes); 0 judges every compile.

That rule equals "anything compiled after each function's first call" only if the
first call in the block compiles; a shape an earlier test compiled would not, and
the test's verdict would depend on test order. So a watch with warm-up clears JAX's
in-memory caches as it starts (`jax.clear_caches()`): every watched test compiles
its functions afresh and is judged on its own calls alone. With `warmup_steps=0`
the caches are kept, so a block run after its own warm-up must compile nothing.

Compiles of single operations outside `jit` (JAX's eager ops, such as `jnp.ones` in
the test body) are counted in `compiles` but never judged: JAX caches them per shape
and the `op_by_op` rule is the one that reports hot eager loops.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpuscope.analyze.shapes import diff_shapes, parse_shape

# The JAX collector's cause vocabulary (tpuscope/collect/jax.py, docs/backends.md):
# which jitted function a compile belongs to, and whether it is an eager op.
_PERSISTENT = re.compile(r" \[persistent cache [a-z]+\]$")
_EAGER = re.compile(r"^JAX library function (?P<f>\S+) compiled for a call outside jit")
_KWARG = re.compile(r"^\[1\]\['(?P<name>[^']+)'\](?P<rest>.*)$")
_POSITIONAL = re.compile(r"^\[0\]\[(?P<i>\d+)\](?P<rest>.*)$")
_FUNCTION_CAUSES = (
    re.compile(r"^first trace of (?P<f>.+)$"),
    re.compile(r"^retrace of (?P<f>[^:]+): "),
    re.compile(r"^(?P<f>.+?) re-defined on every call"),
    re.compile(r"^compile of jitted (?P<f>\S+) \(library code"),
    re.compile(r"^compile of (?P<f>.+)$"),
)


@dataclass(frozen=True)
class JaxRecompile:
    """A compile of a jitted function beyond its warm-up, with what JAX said differed."""

    index: int
    step: int
    function: str
    defined_at: str | None
    number: int  # the function's compile count in the block: 2 = its first recompile
    cause: str | None
    location: str | None
    graph_hash: str | None
    changes: tuple[str, ...]
    fix: str


def clear_caches(warmup_steps: int) -> bool:
    """Give the watch a cold JAX (see the module doc); never imports JAX itself."""
    jax = sys.modules.get("jax")
    if warmup_steps <= 0 or jax is None or not hasattr(jax, "clear_caches"):
        return False
    jax.clear_caches()
    return True


def function_of(cause: Any) -> tuple[str | None, bool]:
    """(jitted function, is an eager op) for a JAX compile row's cause; (None, False)
    for a cause the JAX collector does not write (a torch_xla row)."""
    if not isinstance(cause, str):
        return None, False
    text = _PERSISTENT.sub("", cause)
    if match := _EAGER.match(text):
        return match["f"], True
    for pattern in _FUNCTION_CAUSES:
        if match := pattern.match(text):
            return match["f"], False
    return None, False


def jax_rows(run: Any) -> pd.Series:
    """Which compile rows the JAX collector wrote (a process may run torch_xla too)."""
    compiles = run.compiles
    processes = run.meta.get("processes") or []
    if compiles.empty or not any("jax_version" in p for p in processes):
        return pd.Series(False, index=compiles.index)
    return compiles["cause"].map(lambda c: function_of(c)[0] is not None)


def recompiles(run: Any, warmup_steps: int) -> list[JaxRecompile]:
    """Compiles of each jitted function after its first `warmup_steps`, oldest first."""
    compiles = run.compiles[jax_rows(run)].sort_values("index")
    retraces = run.retraces
    seen: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    out = []
    for row in compiles.to_dict("records"):
        function, eager = function_of(row["cause"])
        if function is None or eager:
            continue
        diffs = _diffs(retraces, int(row["index"]), function)
        defined_at = next((d["defined_at"] for d in diffs if d.get("defined_at")), None)
        earlier = seen.setdefault(_key(seen, function, defined_at), [])
        earlier.append(row)
        if len(earlier) <= warmup_steps:
            continue
        changes, fix = _what_changed(function, diffs, earlier)
        out.append(JaxRecompile(
            index=int(row["index"]), step=int(row["step"]), function=function, defined_at=defined_at,
            number=len(earlier), cause=row.get("cause") or None, location=row.get("location") or None,
            graph_hash=row.get("graph_hash") or None, changes=tuple(changes), fix=fix))
    return out


def _what_changed(function: str, diffs: list[dict[str, Any]],
                  compiles: list[dict[str, Any]]) -> tuple[list[str], str]:
    """JAX's explanation of the last of `compiles`, and its fix; without one
    (JAX_EXPLAIN_CACHE_MISSES=0) the input-shape diff against the function's previous compile."""
    changes = [_diff_text(d) for d in diffs if d["kind"] != "first"]
    if changes or len(compiles) < 2:
        return changes, fix_for(function, diffs)
    changes = _shape_changes(compiles[-2], compiles[-1])
    if not changes:
        return changes, fix_for(function, diffs)
    return changes, (f"Keep the input shapes of {function} the same on every call: pad to a fixed "
                     f"size (or a few bucket sizes) and mask the padding.")


def _key(seen: dict[tuple[str, str | None], Any], function: str,
         defined_at: str | None) -> tuple[str, str | None]:
    """A function is its name and definition site; a compile JAX did not explain (no
    site) joins the earlier compiles of that name."""
    if defined_at is None:
        return next((key for key in seen if key[0] == function), (function, None))
    return (function, None) if (function, None) in seen else (function, defined_at)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def _diffs(retraces: pd.DataFrame, index: int, function: str) -> list[dict[str, Any]]:
    """The retraces rows of this compile for its own function (a compile's trace also
    explains the jitted functions it calls)."""
    if retraces.empty:
        return []
    rows = retraces[(retraces["compile_index"] == index) & (retraces["function"] == function)]
    return [{k: (v if _known(v) else None) for k, v in r.items()} for r in rows.to_dict("records")]


def _diff_text(diff: dict[str, Any]) -> str:
    """A retraces row as the collector's cause words it ("arg x: f32[3] -> f32[4]")."""
    kind, arg, before, after = diff["kind"], diff.get("arg"), diff.get("before"), diff.get("after")
    label = {"input_types": "arg", "static_arg": "static arg", "pytree": "input pytree at",
             "tracing_context": "tracing context"}.get(kind)
    if label and arg is not None:
        return f"{label} {arg_name(arg)}: {before} -> {after}"
    if kind == "redefined":
        return "a new function object on every call, so jit's cache never hits"
    return diff.get("detail") or kind


def arg_name(path: str) -> str:
    """JAX's pytree paths of a call's (args, kwargs): `[0][1]` -> `args[1]`, `[1]['n']` -> `n`."""
    if match := _KWARG.match(path):
        return match["name"] + match["rest"]
    if match := _POSITIONAL.match(path):
        return f"args[{match['i']}]{match['rest']}"
    return path


def _shape_changes(before: dict[str, Any], row: dict[str, Any]) -> list[str]:
    old, new = before.get("input_shapes"), row.get("input_shapes")
    if old is None or new is None:
        return []
    return diff_shapes(list(old), list(new))


def fix_for(function: str, diffs: list[dict[str, Any]]) -> str:
    """The change that stops the retrace, from the first difference JAX reported."""
    diff = next((d for d in diffs if d["kind"] != "first"), None)
    kind, arg = (diff["kind"], arg_name(diff.get("arg") or "")) if diff else ("unknown", None)
    if kind == "input_types":
        old, new = parse_shape(diff.get("before") or ""), parse_shape(diff.get("after") or "")
        if old and new and old.dims == new.dims:
            return (f"Pass {arg} with the same dtype on every call of {function} (cast it, e.g. "
                    f"jnp.asarray(x, jnp.float32); a Python scalar is weakly typed, an array is not).")
        return (f"Give {arg} the same shape on every call of {function}: pad it to a fixed size (or a "
                f"few bucket sizes) and mask the padding; pad or drop a short last batch.")
    if kind == "static_arg":
        return (f"Each new value of the static argument {arg} compiles {function} again: pass it as an "
                f"array (drop it from static_argnums/static_argnames) or keep it to a few values.")
    if kind == "pytree":
        return (f"Call {function} with the same pytree structure every time (same dict keys, list "
                f"lengths, None in the same places).")
    if kind == "tracing_context":
        return f"A JAX setting or context differed between calls of {function}: set it once, before the first call."
    if kind == "redefined":
        return (f"{function} is jitted anew on every call (jax.jit inside a loop or a function, or a new "
                f"lambda/functools.partial each time): create the jitted function once and reuse it.")
    if kind == "debug_info":
        return f"Call {function} the same way every time (the same arguments by position or by keyword)."
    return f"Keep the arguments of {function} the same from call to call: shapes, dtypes, pytree structure, static values."
