"""JAX's cache-miss explanations parsed as JAX 0.10.2 logs them (collect/jax/explain.py), and the
`--trace-steps` window: pure parsing, no JAX run."""

from __future__ import annotations

import pytest

from tpuscope.collect.jax.explain import (
    DEBUG_INFO,
    FIRST,
    INPUT_TYPES,
    PYTREE,
    REDEFINED,
    STATIC_ARG,
    TRACING_CONTEXT,
    cause_text,
    parse_explanation,
)
from tpuscope.collect.trace_steps import parse_window

# -- the explanation parser, on messages exactly as JAX 0.10.2 logs them ------------------

NEVER = (
    "TRACING CACHE MISS at /w/train.py:27 (<module>):\n  never seen function:\n"
    "    f id=140660422161760 defined at /w/train.py:17"
)
REDEF = NEVER + (
    "\n  but seen another function defined on the same line; maybe the function is\n"
    "  being re-defined repeatedly, preventing caching?"
)
TYPES = (
    "TRACING CACHE MISS at /w/train.py:31 (<module>):\n  for f defined at /w/train.py:17\n"
    "  all previously seen cache keys differ. For the closest previous key:\n"
    "  different input types:\n  * at x, now f32[5,8] and before f32[4,8]\n"
    "  * at batch['y'], now i32[5] and before i32[4]"
)
WEAK = (
    "TRACING CACHE MISS at /w/t.py:3 (g):\n  for g defined at /w/t.py:1\n"
    "  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n"
    "  * at s, now f32[]{weak_type=True} and before f32[]{weak_type=False}"
    "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"
)
STATIC = (
    "TRACING CACHE MISS at /w/train.py:35:10 (<module>):\n  for g defined at /w/train.py:21\n"
    "  all previously seen cache keys differ. For the closest previous key:\n  different input pytree:\n"
    "  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree metadata "
    "Static(val=3) and before <class 'jax._src.tree_util.Static'> with pytree metadata "
    "Static(val=2), so the pytree node metadata does not match"
)
TREE = (
    "TRACING CACHE MISS at /w/train.py:39:13 (<module>):\n  for h defined at /w/train.py:37\n"
    "  all previously seen cache keys differ. For the closest previous key:\n  different input pytree:\n"
    "  * at input path [0][0], now <class 'dict'> with 2 children and before <class 'dict'> with 1 "
    "child, so the numbers of children do not match, with the symmetric difference of key sets: {'b'}"
)
CONTEXT = (
    "TRACING CACHE MISS at /w/t.py:9 (<module>):\n  for f defined at /w/t.py:2\n"
    "  all previously seen cache keys differ. For the closest previous key:\n"
    "  Tracing context doesn't match, e.g. due to config or context manager.\n"
    "  * jax_enable_x64 differs: now True and before False"
)
DEBUG = (
    "TRACING CACHE MISS at /w/t.py:9 (<module>):\n  for f defined at /w/t.py:2\n"
    "  all previously seen cache keys differ. For the closest previous key:\n  Debug info doesn't match."
)


def test_parse_first_and_redefined() -> None:
    first = parse_explanation(NEVER)
    assert (first.kind, first.function, first.defined_at, first.callsite) == (
        FIRST,
        "f",
        "/w/train.py:17",
        "/w/train.py:27",
    )
    assert cause_text(first, "f") == "first trace of f"
    redefined = parse_explanation(REDEF)
    assert redefined.kind == REDEFINED
    assert "re-defined on every call" in cause_text(redefined, "f")


def test_a_re_definition_is_one_only_where_the_function_was_traced_before() -> None:
    """compile_rows: JAX's "seen another function defined on the same line" on a function's
    first trace is a library decorator's one line (nnx.jit's), not a re-definition; on the
    same function's next trace it is one."""
    from tpuscope.collect.jax.compile_rows import CompileRows
    from tpuscope.collect.jax.compiles import CompileEvent

    rows = CompileRows()
    causes = []
    for _ in range(2):
        expl = parse_explanation(REDEF)
        event = CompileEvent(
            "jit_f", "f", 0.0, 0.1, 0.1, 1.0, ["f32[4]"], "/w/train.py:27", [], expl, [expl]
        )
        causes.append(str(rows.compile_row(event, 0, 0, 1, True)["cause"]))
    assert causes[0] == "first trace of f" and "re-defined on every call" in causes[1]


def test_parse_input_types_argument_by_argument() -> None:
    expl = parse_explanation(TYPES)
    assert expl.kind == INPUT_TYPES
    assert [(d.arg, d.before, d.after) for d in expl.diffs] == [
        ("x", "f32[4,8]", "f32[5,8]"),
        ("batch['y']", "i32[4]", "i32[5]"),
    ]
    assert (
        cause_text(expl, "f")
        == "retrace of f: arg x: f32[4,8] -> f32[5,8]; arg batch['y']: i32[4] -> i32[5]"
    )
    weak = parse_explanation(WEAK).diffs[0]
    assert (weak.before, weak.after) == ("f32[]{weak_type=False}", "f32[]{weak_type=True}")


def test_parse_static_pytree_context_debug() -> None:
    static = parse_explanation(STATIC)
    assert (static.kind, static.callsite) == (STATIC_ARG, "/w/train.py:35")
    assert [(d.arg, d.before, d.after) for d in static.diffs] == [("[0][1]", "2", "3")]
    assert cause_text(static, "g") == "retrace of g: static arg [0][1]: 2 -> 3"
    tree = parse_explanation(TREE).diffs[0]
    assert (tree.kind, tree.before, tree.after) == (
        PYTREE,
        "dict with 1 child",
        "dict with 2 children",
    )
    assert "{'b'}" in tree.detail
    context = parse_explanation(CONTEXT).diffs
    assert [(d.kind, d.arg, d.before, d.after) for d in context] == [
        (TRACING_CONTEXT, "jax_enable_x64", "False", "True")
    ]
    assert parse_explanation(DEBUG).kind == DEBUG_INFO
    assert parse_explanation("some other warning") is None


def test_trace_window_parsing() -> None:
    assert (
        parse_window("10:20").start == 10
        and 19 in parse_window("10:20")
        and 20 not in parse_window("10:20")
    )
    assert (parse_window("5").start, parse_window("5").stop) == (5, 6)
    assert parse_window("") is None
    for bad in ("a:b", "5:5", "-1:3"):
        with pytest.raises(ValueError, match="trace steps"):
            parse_window(bad)
