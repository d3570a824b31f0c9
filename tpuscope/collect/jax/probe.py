"""Which output of a step its readiness is asked of (ready.py, the lane): one array, found in
as few operations as it takes, since it is looked for after every call of the step function.

Any output times the step (all the outputs of one call are ready together), but what a loop
feeds back into its next call is its state, and a framework that donates the state (Keras's
`fit` returns (logs, state); a cached sampler returns (next token, KV cache) and donates the
cache) deletes it before anyone asks whether it is ready, which says nothing about when the
device computed it. A loss, a metric or a token is small; a state is the parameters or a
cache. So the probe is a scalar array where there is one, else the smallest. A step that
returns its state alone has nothing else to offer: its probe (a `TrainState`'s step counter)
is donated with the state where the loop donates it (`donate_argnums=0`); the lane then takes a
deleted probe's mark as late (lane.py `caught_up`), so a device-bound loop's backlog is spread
over its steps at its next wait. On the CPU VM a donated TrainState step of 42-44 ms that never
blocked had a p50 of 0.03 ms on main (the helper thread met the deleted arrays) and 0.14 ms
with this module before that (the means right: the program's last wait held the backlog).

Most steps return a tuple, a dict or a list of arrays, walked breadth first. A step that returns
a pytree of its own classes (flax's `TrainState`, a Flax NNX `State`, an equinox Module) is
walked through JAX's pytree registry, one level at a time, once per type of output: the
probe's position (the index of each child on its way down) is kept, and later outputs of that
type are followed to it: an attribute or an item at each level where JAX's key leads to the
child itself (flax's `TrainState.step`: one dict lookup), one flatten at a level where it does
not (3 us for flax's TrainState on the CPU VM, where flattening all its leaves took 20 us). An
NNX `Param` is reached as the Variable, whose `is_ready` reads through to its array. Without a probe the step's outputs go to ready.py's
helper thread, which flattens them all each step and wakes for it: 52 us of a 180 us step on a
TPU v5e (ready.py), and Flax NNX's `TrainState` example loop ran 1.5-2x slower on the CPU VM.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

_PROBE_NODES = 32  # nodes walked for a probe when the outputs' last element is no array
_PATH_NODES = 512  # pytree nodes walked, once per type of output, for its probe's position
_PATHS: dict[type, list[Any]] = {}  # a type of output -> its probes' positions, newest first
_WALKED: dict[type, int] = {}  # a type of output -> the walks made for its probe
_KEEP = 4  # positions kept a type
_WALKS = 8  # walks a type: outputs whose probe moves more often go to the helper thread
_TYPES = 64  # types of output remembered (a step's outputs are of one type)


def tail_probe(outputs: Any) -> Any:
    """The output a step's readiness is asked of: a scalar last element with no walk ((state,
    loss): the loss), a lone array itself, else the first scalar or the smallest array
    (_probe): a (token, cache) step's last element is the cache it donates to its next call."""
    if type(outputs) is tuple and outputs:
        last = outputs[-1]
        if getattr(last, "ndim", None) == 0 and hasattr(last, "is_ready"):
            return last
    elif hasattr(outputs, "is_ready"):
        return outputs
    return _probe(outputs)


def _probe(outputs: Any) -> Any:
    """A scalar array among the first _PROBE_NODES nodes of the outputs' tuples, dicts and
    lists, breadth first, else the smallest array met, else the probe of a pytree of the
    program's classes (None if none)."""
    queue, smallest = [outputs], None
    for index in range(_PROBE_NODES):
        if index >= len(queue):
            break
        node = queue[index]
        if hasattr(node, "is_ready"):
            if getattr(node, "ndim", None) == 0:
                return node
            if smallest is None or getattr(node, "size", 0) < getattr(smallest, "size", 0):
                smallest = node
        elif isinstance(node, dict):
            queue.extend(islice(node.values(), _PROBE_NODES - len(queue)))
        elif isinstance(node, (tuple, list)):
            queue.extend(islice(node, _PROBE_NODES - len(queue)))
    return smallest if smallest is not None else _pytree_probe(outputs)


Step = tuple[Any, int]  # one level down a pytree: the child's key (None: flatten), its index


def _pytree_probe(outputs: Any) -> Any:
    """The probe of outputs that are a pytree of other classes: followed to where earlier
    outputs of their type had it (up to _KEEP positions a type: a step's outputs are of one
    structure, an annotated block's calls of a few), found again by a walk where none leads to
    an array, at most _WALKS walks a type (then the helper thread takes them, as before)."""
    kind = type(outputs)
    for path in _PATHS.get(kind, ()):  # .get: another thread may clear it meanwhile
        found = _follow(outputs, path)
        if found is not None:
            return found
    walks = _WALKED.get(kind, 0)
    if walks >= _WALKS:
        return None
    if len(_WALKED) >= _TYPES:  # many types: start again (a step's outputs are of one)
        _PATHS.clear()
        _WALKED.clear()
    _WALKED[kind] = walks + 1
    path = _probe_path(outputs)
    if path is None:
        return None
    kept = _PATHS.get(kind) or []
    _PATHS[kind] = [path, *kept[: _KEEP - 1]]
    return _follow(outputs, path)


def _children(node: Any) -> list[tuple[Any, Any]]:
    """The node's (key, child) pairs, one level of JAX's pytree flattening (none for a leaf)."""
    from jax.tree_util import tree_flatten_with_path  # outputs of a jitted call: JAX is here

    kids = tree_flatten_with_path(node, is_leaf=lambda child: child is not node)[0]
    if len(kids) == 1 and kids[0][1] is node:
        return []
    return [(path[0] if path else None, child) for path, child in kids]


def _by_key(node: Any, key: Any) -> Any:
    """The child JAX's key names: a plain attribute read from the instance's own dict (no
    property runs: a deprecated `.value` would warn in the program), else an item of a
    mapping or a sequence."""
    name = getattr(key, "name", None)
    if name is not None:
        return vars(node)[name]
    return node[key.key if hasattr(key, "key") else key.idx]


def _follow(node: Any, path: tuple[Step, ...]) -> Any:
    """The array at `path` in `node`, or None where the structure differs."""
    try:
        for key, index in path:
            if hasattr(node, "is_ready"):  # an array before the path's end: never index it
                return None  # (that would run an op in the program)
            node = _by_key(node, key) if key is not None else _children(node)[index][1]
    except Exception:  # another structure, or a flatten that fails
        return None
    return node if hasattr(node, "is_ready") else None


def _step(node: Any, key: Any, index: int, child: Any) -> Step:
    """One level of a probe's position: by key where the key leads to this very child."""
    try:
        if key is not None and _by_key(node, key) is child:
            return (key, index)
    except Exception:  # the key names no attribute or item of the node
        pass
    return (None, index)


def _probe_path(outputs: Any) -> tuple[Step, ...] | None:
    """The position of the first scalar array among the outputs' first _PATH_NODES pytree
    nodes, breadth first, else of the smallest array met; None if none."""
    queue: list[tuple[Any, tuple[Step, ...]]] = [(outputs, ())]
    best: tuple[Any, tuple[Step, ...]] | None = None
    for index in range(_PATH_NODES):
        if index >= len(queue):
            break
        node, path = queue[index]
        if hasattr(node, "is_ready"):
            if getattr(node, "ndim", None) == 0:
                best = (node, path)
                break
            if best is None or getattr(node, "size", 0) < getattr(best[0], "size", 0):
                best = (node, path)
            continue
        try:
            kids = _children(node)
        except Exception:  # a flatten that fails: no children here
            continue
        queue.extend((kid, (*path, _step(node, key, i, kid))) for i, (key, kid) in enumerate(kids))
    if best is None or _follow(outputs, best[1]) is not best[0]:
        return None
    return best[1]
