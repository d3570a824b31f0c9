"""The f32 activations around f32 matmuls: which other ops move them, and what share of each
op's bytes they are. Pure pandas over the trace's HLO (stage `tpu_trace`).

Why: a program computed in f32 pays for f32 beyond its matmuls. Every op that reads or writes its
activations (batch norm, activations, pooling and their gradients, layout copies) moves twice the
bytes its bf16 twin moves, and on a TPU those ops are HBM-bound. On a v5e a ResNet-18 in f32 at
default precision took 24.9 ms a step against its bf16 twin's 15.3 ms; of the 9.6 ms, the
convolutions held 4.1 and the ops around them the rest (docs/tpu.md).

Which arrays a bf16 twin would halve: the f32 arrays reached from the f32 matmuls through f32
arrays (their connected component in the step's dataflow), less the step's state: an array of the
shape of something the step returns (parameters, optimizer state, statistics) stays f32 in the
twin, whose master weights and optimizer stay f32. A bf16 program's own f32 work (a loss in f32)
is not reached: its matmuls are not f32.
"""

from __future__ import annotations

from collections import deque

import pandas as pd

from tpuscope.parse.hlo import read_shape


def arrays(shape: object) -> list[tuple[str, float]]:
    """The arrays of an HLO shape ('(f32[64], bf16[8,128])'): (dtype[dims] as written, bytes);
    read by the HLO parser's own shape reader."""
    found, _ = read_shape(str(shape))
    leaves, todo = [], [found] if found is not None else []
    while todo:
        leaf = todo.pop()
        if leaf.is_tuple:
            todo.extend(reversed(leaf.elements))
        else:
            leaves.append((str(leaf), leaf.bytes))
    return leaves


def f32_activation_shares(
    hlo_ops: pd.DataFrame, matmuls: set[tuple[str, str]]
) -> dict[tuple[str, str], float]:
    """{(module, top-level op): the share of its bytes in f32 activations} for `matmuls` (the
    f32 matmuls' top-level ops) and every op the f32 activations reach from them."""
    shares: dict[tuple[str, str], float] = {}
    if hlo_ops.empty or not matmuls:
        return shares
    top = hlo_ops[hlo_ops["fusion"].isna()]
    for (module, _computation), ops in top.groupby(["module", "computation"], observed=True):
        starts = {name for m, name in matmuls if m == module} & set(ops["name"])
        if starts:
            shares.update(
                ((str(module), op), share) for op, share in _component(ops, starts).items()
            )
    return shares


def _component(ops: pd.DataFrame, starts: set[str]) -> dict[str, float]:
    """The ops of one computation reached from `starts` along f32 activation arrays, with each
    one's f32-activation share of the bytes it reads and writes."""
    shape = dict(zip(ops["name"], ops["shape"].astype(str), strict=True))
    operands = {
        name: [o for o in (list(given) if given is not None else []) if o in shape]
        for name, given in zip(ops["name"], ops["operands"], strict=True)
    }
    users: dict[str, list[str]] = {}
    for name, inputs in operands.items():
        for o in inputs:
            users.setdefault(o, []).append(name)
    state = _state_arrays(ops, shape)

    def carries(name: str) -> bool:
        return any(
            a.startswith("f32[") and a not in state and a != "f32[]" for a, _ in arrays(shape[name])
        )

    seen, queue = set(starts), deque(starts)
    while queue:
        name = queue.popleft()
        linked = [o for o in operands[name] if carries(o)]
        linked += users.get(name, []) if carries(name) else []
        for other in linked:
            if other not in seen:
                seen.add(other)
                queue.append(other)
    return {name: _share(name, operands, shape, state) for name in seen}


def _state_arrays(ops: pd.DataFrame, shape: dict[str, str]) -> set[str]:
    """The arrays the computation returns (its root: the last tuple), which a bf16 twin keeps."""
    roots = ops[ops["opcode"] == "tuple"]
    return {a for a, _ in arrays(roots["shape"].iloc[-1])} if not roots.empty else set()


def _share(
    name: str, operands: dict[str, list[str]], shape: dict[str, str], state: set[str]
) -> float:
    moved = [a for o in [*operands[name], name] for a in arrays(shape[o])]
    total = sum(b for _, b in moved)
    f32 = sum(b for a, b in moved if a.startswith("f32[") and a not in state)
    return f32 / total if total else 0.0
