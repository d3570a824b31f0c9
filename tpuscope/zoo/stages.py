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

Compound scaling (EfficientNet): the model multiplies its per-stage width lists and the
widths written as constants in its code (stem 32, top 1280) by `width_coefficient`, and its
stage repeats by `depth_coefficient`; so the coefficient is divided by K instead of those
lists (every width, the constants included, scales by 1/K), the depth coefficient is 1, and
the widths already scaled (`hidden_dim`, the top's output) are divided as the others. Per-block
lists nested in a list (`block_configs`: kernel, in, out, stride, flag) take the same
value-wise map, their kernels, strides and flags being under MIN_WIDTH or not ints.

What it cannot keep, and the zoo records as the builder's failure: a model whose code needs a
deeper stage (CvT indexes its per-layer drop-path rates by stage number).
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


def _nested(value: Any) -> Any:
    """The value-wise map through nested per-block lists; bools and small ints stay."""
    if isinstance(value, list | tuple):
        return [_nested(v) for v in value]
    return _width(value) if isinstance(value, int) and not isinstance(value, bool) else value


def overrides(attrs: dict[str, Any]) -> dict[str, Any]:
    """One block per stage, every width divided by FACTOR (value-wise, so ties hold)."""
    compound = isinstance(attrs.get("width_coefficient"), int | float)
    out: dict[str, Any] = (
        {"width_coefficient": attrs["width_coefficient"] / FACTOR, "depth_coefficient": 1.0}
        if compound
        else {}
    )
    for key, value in attrs.items():
        if key in DEPTHS and _ints(value):
            out[key] = [1] * len(value)
        elif _DIVIDES_WIDTHS.search(key) and isinstance(value, int) and value % FACTOR == 0:
            out[key] = value // FACTOR
        elif key.endswith("_configs") and isinstance(value, list | tuple):
            out[key] = _nested(value)
        elif not _WIDTH.search(key) or _NOT_WIDTH.search(key):
            continue
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = _width(value)
        elif _ints(value) and not compound:  # compound scaling: lists the coefficient scales
            out[key] = [_width(v) for v in value]
    return out
