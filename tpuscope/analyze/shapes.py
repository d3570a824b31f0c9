"""Shapes of graph inputs: parse, diff argument by argument, find varying dims, suggest buckets.

Shapes are strings in HLO notation ("f32[4,41,128]"), the form both the torch_xla
collector (from the HLO entry computation) and the JAX collector (avals) store.
Everything here is pure, so detectors, the pytest plugin and the dashboard share it.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

_SHAPE = re.compile(r"^\s*(?P<dtype>[a-z]+[0-9]*)\[(?P<dims>[^\]]*)\]")


@dataclass(frozen=True)
class Shape:
    """dtype and dims of one array; dims that are not plain integers (bounded dynamic) are None."""

    dtype: str
    dims: tuple[int | None, ...]

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join('?' if d is None else str(d) for d in self.dims)}]"


@functools.lru_cache(maxsize=65536)
def parse_shape(text: str) -> Shape | None:
    """'f32[4,41,128]{2,1,0}' -> Shape('f32', (4, 41, 128)); None for tuples and other text."""
    match = _SHAPE.match(text or "")
    if not match:
        return None
    dims = tuple(
        int(d) if d.strip().isdigit() else None for d in match["dims"].split(",") if d.strip()
    )
    return Shape(match["dtype"], dims)


def diff_shapes(before: Sequence[str], after: Sequence[str], prefix: str = "arg") -> list[str]:
    """What changed between two graphs' parameter lists, argument by argument.

    Same length: positional ("arg 3: f32[4,41,128] -> f32[4,53,128]"). Different
    lengths: aligned with difflib so an inserted argument reads as one insertion
    instead of every later argument looking changed.
    """
    before, after = list(before), list(after)
    if len(before) == len(after):
        return [
            f"{prefix} {i}: {a} -> {b}"
            for i, (a, b) in enumerate(zip(before, after, strict=True))
            if a != b
        ]
    changes: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            changes += [
                f"{prefix} {j1 + k}: {before[i1 + k]} -> {after[j1 + k]}" for k in range(i2 - i1)
            ]
            continue
        changes += [f"{prefix} {i} removed: {before[i]}" for i in range(i1, i2)]
        changes += [f"{prefix} {j} added: {after[j]}" for j in range(j1, j2)]
    changes.append(f"{len(before)} -> {len(after)} {prefix}s")
    return changes


def shape_distance(before: Sequence[str], after: Sequence[str]) -> tuple[int, int, int]:
    """(arguments that differ, dims that differ, total size difference of those dims).

    Ordering graphs by this picks the closest one to diff against: fewest changed
    arguments, then fewest changed dims, then the nearest sizes (41 -> 45 reads better
    than 64 -> 45).
    """
    if len(before) != len(after):
        return (
            abs(len(before) - len(after))
            + sum(a != b for a, b in zip(before, after, strict=False)),
            10**6,
            0,
        )
    args = dims = gap = 0
    for a, b in zip(before, after, strict=True):
        if a == b:
            continue
        args += 1
        sa, sb = parse_shape(a), parse_shape(b)
        if sa is None or sb is None or sa.dtype != sb.dtype or len(sa.dims) != len(sb.dims):
            dims += 100
            continue
        for x, y in zip(sa.dims, sb.dims, strict=True):
            if x != y:
                dims += 1
                gap += abs((x or 0) - (y or 0))
    return args, dims, gap


@dataclass
class VaryingDim:
    """One (argument, dim) whose size differs between graphs of one call site."""

    arg: int
    dim: int
    dtype: str
    values: list[int]  # one per graph, in compile order

    @property
    def distinct(self) -> list[int]:
        return sorted(set(self.values))


def varying_dims(shape_lists: Iterable[Sequence[str]]) -> list[VaryingDim]:
    """Dims that take more than one value across graphs with the same signature.

    Only graphs with the same number of arguments and the same dtype and rank per
    argument are compared (others are different programs, not the same one resized).
    """
    graphs = [tuple(s) for s in shape_lists]
    if len(graphs) < 2:
        return []
    # A storm compiles the same few signatures thousands of times: parse each distinct one once
    # and map the per-graph values back through the inverse index (numpy), not graph by graph.
    index: dict[tuple[str, ...], int] = {}
    inverse = np.fromiter(
        (index.setdefault(g, len(index)) for g in graphs), dtype=np.int64, count=len(graphs)
    )
    parsed = [[parse_shape(s) for s in shapes] for shapes in index]
    width = len(parsed[0])
    if any(len(p) != width for p in parsed):
        return []
    found: list[VaryingDim] = []
    for arg in range(width):
        column = [p[arg] for p in parsed]
        first = column[0]
        if first is None or any(
            s is None or s.dtype != first.dtype or len(s.dims) != len(first.dims) for s in column
        ):
            continue
        for dim in range(len(first.dims)):
            values = [s.dims[dim] for s in column if s is not None]
            if any(v is None for v in values) or len(set(values)) < 2:
                continue
            per_graph = np.asarray(values, dtype=np.int64)[inverse]
            found.append(VaryingDim(arg, dim, first.dtype, per_graph.tolist()))
    return found


@dataclass
class Bucketing:
    """A padding plan for one varying dim: every value pads up to the next bucket."""

    buckets: list[int]
    waste: float  # padded elements / elements after padding, over the observed values
    values: list[int]

    def describe(self) -> str:
        return "{" + ", ".join(map(str, self.buckets)) + "}"


def bucket_padding(values: Sequence[int], buckets: Sequence[int]) -> float:
    """Padded elements over elements after padding, each value padded to the next bucket."""
    observed = np.asarray(values, dtype=np.int64)
    bounds = np.sort(np.asarray(buckets, dtype=np.int64))
    at = np.searchsorted(bounds, observed, side="left")
    if at.size and at.max() >= len(bounds):
        raise ValueError(f"a value is larger than every bucket {list(bounds)}")
    total = int(bounds[at].sum()) if at.size else 0
    return (total - int(observed.sum())) / total if total else 0.0


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def _partitions(
    distinct: list[int], weights: list[int], bound_of: dict[int, int]
) -> Iterator[list[int]]:
    """For k = 1, 2, ...: the k buckets that minimise padded elements (ties: any).

    The classic 1-D dynamic program over sorted sizes, one row per k, each row
    vectorised with numpy through prefix sums (padding of a group = bound x its
    weight - its weighted sizes), so thousands of distinct sizes stay fast.
    """
    m = len(distinct)
    values = np.asarray(distinct, dtype=float)
    w = np.concatenate([[0.0], np.cumsum(weights, dtype=float)])
    s = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=float) * values)])
    bounds = np.asarray([bound_of[v] for v in distinct], dtype=float)
    prev = np.full(m + 1, np.inf)
    prev[0] = 0.0
    backs: list[np.ndarray] = []
    for _ in range(m):
        row = np.full(m + 1, np.inf)
        back = np.zeros(m + 1, dtype=int)
        for end in range(1, m + 1):  # group = sizes[start .. end-1], start in [0, end)
            cand = prev[:end] + bounds[end - 1] * (w[end] - w[:end]) - (s[end] - s[:end])
            best = int(np.argmin(cand))
            row[end], back[end] = cand[best], best
        backs.append(back)
        prev = row
        buckets, end = [], m
        for back_row in reversed(backs):
            buckets.append(bound_of[distinct[end - 1]])
            end = int(back_row[end])
        yield sorted(set(buckets))


def suggest_buckets(values: Sequence[int], max_waste: float = 0.10, multiple: int = 8) -> Bucketing:
    """The fewest buckets whose padding waste stays under max_waste.

    Buckets are rounded up to a multiple of `multiple` (TPU tiles are 8x128, so
    sizes that are multiples of 8 waste less of each tile) when the values are at
    least that large and the rounded plan still meets the bound; otherwise they are
    observed values. Waste counts every observation equally: padded elements over
    elements after padding, along this dim.
    """
    observed = [int(v) for v in values]
    distinct = sorted(set(observed))
    counts = Counter(observed)
    weights = [counts[v] for v in distinct]
    plans: list[Bucketing] = []
    round_ok = multiple > 1 and distinct[0] >= multiple
    for rounded in (True, False) if round_ok else (False,):
        bound_of = {v: _round_up(v, multiple) if rounded else v for v in distinct}
        for buckets in _partitions(distinct, weights, bound_of):
            waste = bucket_padding(observed, buckets)
            if waste <= max_waste + 1e-12:
                plans.append(Bucketing(buckets, waste, observed))
                break
    if not plans:  # one bucket per distinct value: no padding at all
        return Bucketing(distinct, 0.0, observed)
    return min(
        plans, key=lambda p: (len(p.buckets), -all(b % multiple == 0 for b in p.buckets), p.waste)
    )
