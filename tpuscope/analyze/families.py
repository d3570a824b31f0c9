"""Graph families: which compiles are first compiles and which are recompiles.

A family is what the program compiles from one place in its code:
- torch_xla (and imported PT_XLA_DEBUG logs): the user's line that cut the graph
  (or torch_xla's stated cause when no user frame is known) and the graph's
  structure: the dtype and rank of every input when the shapes are known, else the
  number of inputs. A setup graph, an eval graph, the optimizer's first step (which
  creates its state) and the steady-state step are different families, so each one's
  first compile is a first compile, wherever in the run it happens; a graph that
  compiles again at the same line with the same structure is a recompile (a dim
  that changed size, a Python number traced as a constant).
- JAX: the jitted function (its name and the static argument positions it was jitted
  with). Every further compile of it is a recompile, whatever JAX's explanation says
  differed: new shapes or dtypes, another pytree, a new value of a static argument
  (which is why `static_argnums` advice exists), a re-definition.
  An op run outside jit compiles once per primitive, parameters and shapes: each such
  compile is its own family (eager hot loops are the `op_by_op` rule's business).
- A compile with nothing known of it (no line, no cause, no inputs) is its own family:
  a recompile is never claimed without evidence.

Pure: a compiles DataFrame in, the same rows with family columns out.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from tpuscope.analyze.shapes import parse_shape

FAMILY_COLUMNS = ("family", "family_seq", "recompile", "function", "eager", "backend")
# The JAX collector's cause vocabulary (collect/jax/explain.cause_text, docs/backends.md), read
# only for runs written before schema 2 (compiles.backend / .function / .eager columns).
_PERSISTENT = re.compile(r" \[persistent cache [a-z]+\]$")
_JAX_EAGER = re.compile(r"^JAX library function (?P<fn>\S+) compiled for a call outside jit")
_JAX_FUNCTION = (
    re.compile(r"^first trace of (?P<fn>.+)$"),
    re.compile(r"^retrace of (?P<fn>[^:]+): "),
    re.compile(r"^(?P<fn>.+?) re-defined on every call"),
    re.compile(r"^compile of jitted (?P<fn>\S+) \(library code"),
    re.compile(r"^compile of (?P<fn>.+)$"),
)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def jax_program(cause: Any) -> tuple[str | None, bool]:
    """(jitted function, is an eager op) from a JAX compile row's cause; (None, False) for a
    cause the JAX collector does not write (a torch_xla row)."""
    if not isinstance(cause, str):
        return None, False
    text = _PERSISTENT.sub("", cause)
    if match := _JAX_EAGER.match(text):
        return match["fn"], True
    for pattern in _JAX_FUNCTION:
        if match := pattern.match(text):
            return match["fn"], False
    return None, False


def _jax_function(row: dict[str, Any]) -> tuple[str | None, bool]:
    """The collector's own columns; the cause text only for runs written before schema 2."""
    if _known(row.get("function")):
        return row["function"], bool(row.get("eager"))
    return jax_program(row.get("cause"))


def _signature(row: dict[str, Any]) -> str:
    shapes = row.get("input_shapes")
    if _known(shapes) and len(shapes):
        parsed = [parse_shape(s) for s in shapes]
        return ",".join(f"{p.dtype}/{len(p.dims)}" if p is not None else str(s)
                        for p, s in zip(parsed, shapes, strict=True))
    n = row.get("num_inputs")
    return f"{int(n)} inputs" if _known(n) else ""


def _xla_family(row: dict[str, Any]) -> str | None:
    site = row.get("location") if _known(row.get("location")) else None
    site = site or (row.get("cause") if _known(row.get("cause")) else None)
    signature = _signature(row)
    if not site and not signature:
        return None
    return f"{site or 'unknown line'} | {signature or 'inputs unknown'}"


def _process(row: dict[str, Any]) -> str:
    return f"{row.get('host')}/{row.get('pid')}"


def _backend(row: dict[str, Any], backends: dict[str, str]) -> str:
    if _known(row.get("backend")):  # written by the collector (schema 2 on)
        return row["backend"]
    known = backends.get(_process(row))
    if known == "jax" or (known is None and jax_program(row.get("cause"))[0]):
        return "jax"
    return known or "torch_xla"


def process_backends(meta: dict[str, Any]) -> dict[str, str]:
    """'host/pid' -> the backend that process reported (meta['processes'])."""
    return {f"{p.get('host')}/{p.get('pid')}": p["backend"] for p in meta.get("processes", [])
            if p.get("backend")}


def graph_families(compiles: pd.DataFrame, backends: dict[str, str] | None = None) -> pd.DataFrame:
    """The compiles in time order, each with its family, its number within the family
    (0 = first compile), whether it is a recompile, and the JAX function / eager flag."""
    columns = {name: pd.Series(dtype=object) for name in FAMILY_COLUMNS}
    if compiles.empty:
        return compiles.assign(**columns)
    order = [c for c in ("time_ns", "index") if c in compiles.columns]
    ordered = compiles.sort_values(order, kind="stable") if order else compiles
    backends = backends or {}
    seen: dict[str, int] = {}
    out: dict[str, list[Any]] = {name: [] for name in FAMILY_COLUMNS}
    for n, row in enumerate(ordered.to_dict("records")):
        backend = _backend(row, backends)
        function, eager = _jax_function(row) if backend == "jax" else (None, False)
        family = _family(row, n, backend, function, eager)
        seq = seen.get(family, 0)
        seen[family] = seq + 1
        for name, value in zip(FAMILY_COLUMNS, (family, seq, seq > 0, function, eager, backend),
                               strict=True):
            out[name].append(value)
    return ordered.assign(**out)


def _family(row: dict[str, Any], n: int, backend: str, function: str | None, eager: bool) -> str:
    process = _process(row)
    if backend == "jax":
        if eager or not function:
            return f"{process} | eager #{n}"
        return f"{process} | jit {function}"
    family = _xla_family(row)
    return f"{process} | {family}" if family else f"{process} | unknown #{n}"


def recompiles(families: pd.DataFrame) -> pd.DataFrame:
    """The rows that are recompiles (a further compile of a family that compiled before)."""
    if families.empty or "recompile" not in families:
        return families.iloc[0:0]
    return families[families["recompile"].astype(bool)]
