"""Models that are one backbone of stages (CNNs, Swin, PVT, ConvNeXt): a scale-down for their stage lists.

A backbone's config lists per-stage depths (`depths`, `depth`, `num_block_repeats`) and
per-stage widths, and its widths are tied to each other by equalities (a stage's input is the
previous stage's output, the stem's output the first stage's input, `hidden_size` the last
stage's width, `embed_dim` x 2^i stage i's) and to its per-stage head counts by divisibility
(width = heads x head_dim). The text rules (hidden 64, 4 heads) break those ties (Swin's 3
heads do not divide 64). One value-wise map of the config's widths, v -> v // K for v >= 16,
keeps every equality between config fields (the same value maps to the same value) and keeps
head counts dividing the widths wherever head_dim is a multiple of K (32 -> 8 for Swin), so
head counts, kernel sizes, strides, patch and image sizes stay as they are; each listed stage
keeps one block. Small values (the image's 3 channels, a stem's 8) stay. Group counts
(GroupNorm's `num_groups`) and rounding divisors divide the widths, so they are divided by K
too where they can be: width / group count is kept.

What it cannot keep, and the zoo records as the builder's failures: widths written as
constants in the modeling code (EfficientNet's stem 32 and top 1280, scaled by its
`width_coefficient`), widths nested inside per-block lists (PP-LCNet's `block_configs`), and
a model whose code needs a deeper stage (CvT indexes its drop-path rates by stage number).
Applied to the model's own config only (shrink.overrides): a staged sub-config of a composite
(an audio tower, a detector's backbone) is tied to the rest of the tree and keeps the text rules.
"""

from __future__ import annotations

import re
from typing import Any

FACTOR = 4  # widths / 4: head_dim 32 becomes 8, ResNet-50's 2048 becomes 512
MIN_WIDTH = 16
DEPTHS = ("depths", "depth", "num_block_repeats", "stage_num_blocks")
_WIDTH = re.compile(
    r"(hidden_sizes?|embed_dims?|embedding_size|hidden_dim|_channels|channels$"
    r"|groups_width|key_dim|intermediate_size|(^|_)dims?$)"
)
_DIVIDES_WIDTHS = re.compile(r"^num_groups$|divisor$")
_NOT_WIDTH = re.compile(
    r"^num_channels$|kernel|stride|patch_(size|stride|padding)|image|window|pool|ratio"
)


def _ints(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) > 1
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def is_staged(attrs: dict[str, Any]) -> bool:
    """Whether the config is a backbone of stages: a per-stage depth list of two or more."""
    return any(_ints(attrs.get(key)) for key in DEPTHS)


def _width(value: int) -> int:
    return value // FACTOR if value >= MIN_WIDTH else value


def overrides(attrs: dict[str, Any]) -> dict[str, Any]:
    """One block per stage, every width divided by FACTOR (value-wise, so ties hold)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if key in DEPTHS and _ints(value):
            out[key] = [1] * len(value)
        elif _DIVIDES_WIDTHS.search(key) and isinstance(value, int) and value % FACTOR == 0:
            out[key] = value // FACTOR
        elif not _WIDTH.search(key) or _NOT_WIDTH.search(key):
            continue
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = _width(value)
        elif _ints(value):
            out[key] = [_width(v) for v in value]
    return out
