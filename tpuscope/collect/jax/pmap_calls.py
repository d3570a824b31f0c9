"""What a pmapped call's compile is: the user's function, and what differed from its last compile.

In jax 0.10 `jax.pmap(f)` is `jit(shard_map(_fun))` with `_fun` JAX's own wrapper, so its
compiles are logged as `jit(_fun)` and JAX's cache-miss explanations describe JAX's wrapper
("never seen function <unknown>"), not the user's call. The pmap hook (hooks.PmapHook) knows
which pmapped call is running when the compile happens, and its arguments; this module turns
them into the explanation JAX does not give: per argument leaf (named by the function's own
parameter names, `params['w1']`), its dtype and shape and its sharding, diffed against the
same function's previous compile. A new input sharding alone compiles a pmapped function
again (measured, jax 0.10: `flax.jax_utils.replicate` puts the state on a mesh whose axis is
`_device_put_sharded`, the pmapped step returns it on its own `axis_name` mesh, and the
second call compiles the same program again).

JAX does not explain the traces of a library's jitted function either (Keras's `train_step`,
jitted in keras/src/backend/jax/trainer.py): its compiles get the same explanation, from the
call the jit hook tracks (hooks.JitHook._tracks), so a short last batch is `data[0]: f32[32,...]
-> f32[8,...]`, not a flat argument index.

Runs at a compile only (never per call); its cost is one pytree flatten of the call's
arguments.
"""

from __future__ import annotations

from typing import Any

from tpuscope.collect.jax.explain import (
    FIRST,
    INPUT_SHARDING,
    INPUT_TYPES,
    UNKNOWN,
    Diff,
    Explanation,
    aval_text,
)

Leaf = tuple[str, str, str]  # (argument name, dtype and shape, sharding)
MAX_DIFFS = 64  # a pytree of thousands of leaves resharded at once is named by its first ones


def sharding_text(leaf: Any) -> str:
    """Where a leaf lives: 'host' for NumPy data and Python scalars, else its sharding, with a
    NamedSharding's mesh axes and spec (what differs between two placements of one value)."""
    sharding = getattr(leaf, "sharding", None)
    if sharding is None:
        return "host"
    mesh, spec = getattr(sharding, "mesh", None), getattr(sharding, "spec", None)
    if mesh is not None and spec is not None:
        axes = ", ".join(f"'{name}': {size}" for name, size in mesh.shape.items())
        return f"NamedSharding(mesh {{{axes}}}, {spec})"
    return str(sharding)


def signature(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Leaf]:
    """Per argument leaf, named by the function's parameters (`params['w1']`): its dtype and
    shape, its sharding. Static arguments are left out: their values are in `statics`."""
    from jax.tree_util import keystr, tree_flatten_with_path

    named = [
        (target.params[i] if i < len(target.params) else f"args[{i}]", arg)
        for i, arg in enumerate(args)
        if i not in target.static
    ]
    out: dict[str, Leaf] = {}
    for base, value in [*named, *kwargs.items()]:
        for path, leaf in tree_flatten_with_path(value)[0]:
            name = base + keystr(path)
            out[name] = (name, _kind(leaf), sharding_text(leaf))
    return out


def _kind(leaf: Any) -> str:
    from jax._src import core

    try:
        return aval_text(core.shaped_abstractify(leaf))
    except TypeError:
        return type(leaf).__name__


def statics(target: Any, args: tuple[Any, ...]) -> list[str]:
    """The static_broadcasted_argnums values of the call (a new value is a new program)."""
    return [f"static {i}={args[i]!r}"[:200] for i in target.static if i < len(args)]


def diffs(before: dict[str, Leaf] | None, after: dict[str, Leaf]) -> list[Diff]:
    """What differs from the previous compile of the same function, leaf by leaf."""
    if before is None:
        return [Diff(FIRST)]
    out = [
        Diff(INPUT_TYPES, name, before[name][1], kind)
        for name, (_, kind, _) in after.items()
        if name in before and before[name][1] != kind
    ]
    if not out:
        out = [
            Diff(INPUT_SHARDING, name, before[name][2], where)
            for name, (_, _, where) in after.items()
            if name in before and before[name][2] != where
        ]
    if not out and set(before) != set(after):
        out = [Diff(UNKNOWN, detail="the arguments' pytree structure changed")]
    if not out:
        out = [
            Diff(
                UNKNOWN, detail="the same argument shapes, dtypes and shardings as the last compile"
            )
        ]
    return out[:MAX_DIFFS]


class PmapCompiles:
    """Each pmapped function's last compiled signature, to diff the next compile against."""

    def __init__(self) -> None:
        self._last: dict[Any, dict[str, Leaf]] = {}

    def explain(
        self, event: Any, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Make `event` the user's function's compile, with the diff as its explanation (JAX's
        own explanations of this trace describe its pmap wrapper: they are dropped)."""
        after = signature(target, args, kwargs)
        found = diffs(self._last.get(target), after)
        self._last[target] = after
        kind = found[0].kind
        event.function = target.name
        event.explanation = Explanation(
            target.name, target.defined_at, event.location, kind, found, time_s=event.start_s
        )
        event.explanations, event.stale_explanations = [event.explanation], []
        event.statics = statics(target, args)
