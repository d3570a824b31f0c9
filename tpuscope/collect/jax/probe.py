"""Which output of a step its readiness is asked of (ready.py, the lane): one array, found in
as few operations as it takes, since it is looked for after every call of the step function.

Any output times the step (all the outputs of one call are ready together), but what a loop
feeds back into its next call is its state, and a framework that donates the state (Keras's
`fit` returns (logs, state); a cached sampler returns (next token, KV cache) and donates the
cache) deletes it before anyone asks whether it is ready, which says nothing about when the
device computed it. A loss, a metric, a step counter or a token is small; a state is the
parameters or a cache. So the probe is a scalar array where there is one, else the smallest.

Most steps return a tuple, a dict or a list of arrays, walked breadth first. A step that returns
a pytree of its own classes (flax's `TrainState`, a Flax NNX `State`, an equinox Module) is
walked through JAX's pytree registry, one level at a time, once per type of output: the
probe's position (the index of each child on its way down) is kept, and later outputs of that
type are followed to it: an attribute or an item a level where JAX's key says which (flax's
`TrainState.step`: one dict lookup), one flatten a level where it does not (3 us for flax's
TrainState on the CPU VM, where flattening all its leaves took 20 us). Without a probe the step's outputs go to ready.py's
helper thread, which flattens them all each step and wakes for it: 52 us of a 180 us step on a
TPU v5e (ready.py), and Flax NNX's `TrainState` example loop ran 1.5-2x slower on the CPU VM.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

_PROBE_NODES = 32  # nodes walked for a probe when the outputs' last element is no array
_PATH_NODES = 512  # pytree nodes walked, once per type of output, for its probe's position
_PATHS: dict[type, Any] = {}  # a type of output -> its probe's position (None: none)
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


Step = tuple[Any, int]  # one level down a pytree: the child's key (JAX's key path entry), index


def _pytree_probe(outputs: Any) -> Any:
    """The probe of outputs that are a pytree of other classes: followed to where the last
    outputs of their type had it, found again where that is no array (another structure)."""
    kind = type(outputs)
    if kind in _PATHS:
        path = _PATHS[kind]
        found = _follow(outputs, path) if path is not None else None
        if found is not None or path is None:
            return found
    if len(_PATHS) >= _TYPES:
        _PATHS.clear()
    path = _PATHS[kind] = _probe_path(outputs)
    return _follow(outputs, path) if path is not None else None


def _children(node: Any) -> list[tuple[Any, Any]]:
    """The node's (key, child) pairs, one level of JAX's pytree flattening (none for a leaf)."""
    from jax.tree_util import tree_flatten_with_path  # outputs of a jitted call: JAX is here

    kids = tree_flatten_with_path(node, is_leaf=lambda child: child is not node)[0]
    if len(kids) == 1 and kids[0][1] is node:
        return []
    return [(path[0] if path else None, child) for path, child in kids]


def _step_into(node: Any, key: Any, index: int) -> Any:
    """The child of `node` at `key`: a plain attribute read from the instance's own dict (no
    property runs: a deprecated `.value` would warn in the program), an item of a mapping or a
    sequence, else (no key: one that does not lead to the child itself) one level flattened."""
    if key is not None:
        name = getattr(key, "name", None)
        if name is not None:
            return vars(node)[name]
        return node[key.key if hasattr(key, "key") else key.idx]
    return _children(node)[index][1]


def _follow(node: Any, path: tuple[Step, ...]) -> Any:
    """The array at `path` in `node`, or None where the structure differs."""
    try:
        for key, index in path:
            node = _step_into(node, key, index)
    except Exception:  # another structure, or a flatten that fails
        return None
    return node if hasattr(node, "is_ready") else None


def _probe_path(outputs: Any) -> tuple[Step, ...] | None:
    """The position of the first scalar array among the outputs' first _PATH_NODES pytree
    nodes, breadth first, else of the smallest array met; None if none, or if following the
    keys does not lead to the array itself (a pytree whose keys name no attribute or item)."""
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
        queue.extend((kid, (*path, (key, i))) for i, (key, kid) in enumerate(kids))
    if best is None:
        return None
    found, path = best
    if _follow(outputs, path) is found:
        return path
    flattened = tuple((None, index) for _, index in path)  # the keys lead elsewhere
    return flattened if _follow(outputs, flattened) is found else None
