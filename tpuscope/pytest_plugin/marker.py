"""Which tests are watched, and how: `@pytest.mark.tpuscope(...)`, the `tpuscope` fixture, or
`--tpuscope`; the marker's keywords checked against an allowlist (the pytest-benchmark way)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from tpuscope.pytest_plugin.options import Options

if TYPE_CHECKING:
    from tpuscope.watch.engine import Limits, Watch

MARKER = FIXTURE = "tpuscope"
MARKER_HELP = (
    "tpuscope(max_recompiles=0, max_fallbacks=0, warmup_compiles=1, allow_fallbacks=[]): "
    "fail the test if it recompiles (a graph compiled again from the same line and "
    "structure; JAX: a jitted function compiled again) or runs ops on the host (CPU fallbacks)"
)


class MarkerError(ValueError):
    """A @pytest.mark.tpuscope with arguments it does not take."""


@dataclass(frozen=True)
class Spec:
    """How one test is watched; limits of None are not checked."""

    warmup_compiles: int = 1  # compiles of each graph family that are not recompiles
    max_recompiles: int | None = None
    max_fallbacks: int | None = None
    allow_fallbacks: tuple[str, ...] = ()
    manual: bool = False  # the test takes the fixture and places its own watches

    def limits(self) -> Limits:
        from tpuscope.watch.engine import Limits

        return Limits(self.max_recompiles, self.max_fallbacks, self.allow_fallbacks)


SPEC_KEY = pytest.StashKey[Spec]()
WATCHES_KEY: pytest.StashKey[list[Watch]] = pytest.StashKey()


def _nonnegative(name: str, value: Any, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MarkerError(f"{name} must be an integer >= 0, not {value!r}")
    return value


def _op_names(value: Any) -> tuple[str, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, list | tuple | set)
        or not all(isinstance(v, str) for v in value)
    ):
        raise MarkerError(
            f"allow_fallbacks must be a list of op names such as ['aten::nonzero'], not {value!r}"
        )
    return tuple(value)


_CHECKS = {
    "max_recompiles": lambda v: _nonnegative("max_recompiles", v, allow_none=True),
    "max_fallbacks": lambda v: _nonnegative("max_fallbacks", v, allow_none=True),
    "warmup_compiles": lambda v: _nonnegative("warmup_compiles", v, allow_none=False),
    "allow_fallbacks": _op_names,
    "warmup_steps": lambda v: _nonnegative("warmup_steps", v, allow_none=False),  # the older name
}


def marker_kwargs(marker: pytest.Mark) -> dict[str, Any]:
    """The marker's keywords, checked against the allowlist (the pytest-benchmark way)."""
    if marker.args:
        raise MarkerError(f"takes keyword arguments only, got {marker.args!r}")
    unknown = sorted(set(marker.kwargs) - set(_CHECKS))
    if unknown:
        raise MarkerError(
            f"unknown keyword {unknown[0]!r} (it takes {', '.join(list(_CHECKS)[:4])})"
        )
    if {"warmup_compiles", "warmup_steps"} <= set(marker.kwargs):
        raise MarkerError("warmup_steps is the older name of warmup_compiles: give one")
    given = {name: _CHECKS[name](value) for name, value in marker.kwargs.items()}
    if "warmup_steps" in given:
        given["warmup_compiles"] = given.pop("warmup_steps")
    return given


def spec_for(item: pytest.Item, options: Options) -> Spec | None:
    """A marker's value wins over the command line; a marked test's limits default to 0."""
    marker = item.get_closest_marker(MARKER)
    manual = FIXTURE in getattr(item, "fixturenames", ())
    if marker is None and not manual and not options.watch_all:
        return None
    given = marker_kwargs(marker) if marker is not None else {}
    default = 0 if marker is not None else None
    cli = {"max_recompiles": options.max_recompiles, "max_fallbacks": options.max_fallbacks}
    limits = {
        k: given[k] if k in given else (cli[k] if cli[k] is not None else default) for k in cli
    }
    return Spec(
        warmup_compiles=given.get("warmup_compiles", 1),
        allow_fallbacks=given.get("allow_fallbacks", ()),
        manual=manual,
        **limits,
    )


def uses_tpuscope(source: bytes) -> bool:
    """Does a test file mark a test with tpuscope or take the fixture? Parsed only when the
    name occurs at all; text that merely mentions it (a string, a comment) does not count."""
    if b"tpuscope" not in source:
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False  # pytest reports it when it imports the file
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == MARKER:
            owner = node.value
            if (isinstance(owner, ast.Attribute) and owner.attr == "mark") or (
                isinstance(owner, ast.Name) and owner.id == "mark"
            ):
                return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            arg.arg == FIXTURE for arg in [*node.args.args, *node.args.kwonlyargs]
        ):
            return True
    return False
