"""How many layers a tiny model keeps, and which: one layer of each distinct kind.

A config says what kind each layer is in one of several encodings, all kept consistent here:
- per-layer lists (layer_types, mlp_layer_types, ...) of the layer count: the layers kept are
  the first of each distinct combination of kinds (at least 2, at most 4);
- index lists (attn_layer_indices, hybrid_layer_ids): remapped onto the kept layers;
- a cyclic pattern shorter than the layer count (recurrent_gemma's block_types, repeated over
  the layers): reduced to its distinct kinds in order, so n layers hold every kind;
- a period and offset (jamba's attention every 8th layer from the 4th): period 2 over 4 layers,
  so every kind is there and repeats (zamba ties one shared attention block from its first
  layer to the others: with one such layer the tie has no target);
- counts of layers of one kind (first_k_dense_replace, num_kv_shared_layers): scaled to the new
  layer count, kept strictly between 0 and it when they were (both kinds survive).
Finally `needs_attention`: a hybrid whose layers are all linear (Mamba, linear attention, conv)
cannot run (its cache has no attention layer to ask for the sequence length), and every real
checkpoint of such a type has attention layers, so the last layer is made an attention layer.
"""

from __future__ import annotations

import re
from typing import Any

LAYERS = (
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "n_layers",
    "decoder_layers",
    "encoder_layers",
    "num_decoder_layers",
    "num_encoder_layers",
    "text_num_hidden_layers",
)
MAX_KINDS = 4
_COUNT = re.compile(r"^first_k_|_layers$")
_NOT_COUNT = re.compile(r"nextn|mtp|predict|^num_hidden|^num_layers")
_NO_ATTENTION = ("linear_attention", "mamba", "conv", "recurrent", "ssm", "mlp", "moe", "dummy")
_INDEX_SUFFIXES = ("indices", "idxs", "layer_ids")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def index_lists(default: Any, layers: int) -> dict[str, list[int]]:
    """Lists of layer indices (attn_layer_indices, full_attn_idxs, ...): which layers are of a kind."""
    return {
        k: list(v)
        for k, v in vars(default).items()
        if k.endswith(_INDEX_SUFFIXES)
        and isinstance(v, list | tuple)
        and v
        and all(_int(i) and 0 <= i < layers for i in v)
    }


def _per_layer(default: Any, layers: int) -> list[list[Any]]:
    lists = [
        list(v) for v in vars(default).values() if isinstance(v, list | tuple) and len(v) == layers
    ]
    derived = _safe_layer_types(
        default
    )  # a property on some configs (jamba, bamba, recurrent_gemma)
    if derived is not None and len(derived) == layers and derived not in lists:
        lists.append(derived)
    lists += [
        [i in members for i in range(layers)] for members in index_lists(default, layers).values()
    ]
    per_layer = heterogeneous(default)
    if per_layer:  # a heterogeneous config's per-layer overrides are kinds too
        lists.append([repr(per_layer.get(i)) for i in range(layers)])
    return lists


def heterogeneous(config: Any) -> dict[int, dict[str, Any]]:
    """A heterogeneous config's per-layer overrides ({layer: {attribute: value}}), {} when none."""
    spec = vars(config).get("_heterogeneity_spec")
    return dict(getattr(spec, "per_layer_overrides", None) or {})


def _safe_layer_types(config: Any) -> list[Any] | None:
    try:
        value = getattr(config, "layer_types", None)
    except Exception:  # a heterogeneous config refuses the global read
        return None
    return list(value) if isinstance(value, list | tuple) else None


def kept_layers(default: Any, layers: int) -> list[int] | None:
    """One layer of each distinct kind (at least 2 layers, at most MAX_KINDS), None when the
    config has no per-layer kinds."""
    lists = _per_layer(default, layers)
    if not lists or layers <= 2:
        return None
    firsts: dict[str, int] = {}
    for i, kinds in enumerate(zip(*lists, strict=True)):
        firsts.setdefault(repr(kinds), i)
    keep = sorted(firsts.values())[:MAX_KINDS]
    for i in range(layers):
        if len(keep) >= 2:
            break
        if i not in keep:
            keep = sorted([*keep, i])
    return keep


def _seconds(default: Any, layers: int, keep: list[int]) -> list[int]:
    """The layers to add beyond one of each kind: each kind's second layer first (a kind then
    repeats: zamba ties its shared attention block from the first hybrid layer to the others),
    then the rest in order."""
    lists = _per_layer(default, layers)
    seen: dict[str, int] = {}
    seconds = []
    for i, kinds in enumerate(zip(*lists, strict=True)):
        seen[repr(kinds)] = seen.get(repr(kinds), 0) + 1
        if seen[repr(kinds)] == 2:
            seconds.append(i)
    return [*seconds, *[i for i in range(layers) if i not in keep and i not in seconds]]


def _patterns(attrs: dict[str, Any], layers: int) -> dict[str, list[str]]:
    """Cyclic patterns: string lists shorter than the layer count with a repeated kind."""
    return {
        k: list(dict.fromkeys(v))
        for k, v in attrs.items()
        if isinstance(v, list | tuple)
        and 1 < len(v) < layers
        and all(isinstance(s, str) for s in v)
        and len(set(v)) < len(v)
    }


def _counts(attrs: dict[str, Any], layers: int) -> dict[str, int]:
    """Counts of layers of one kind (first_k_dense_replace, num_kv_shared_layers, n_input_layers)."""
    return {
        k: v
        for k, v in attrs.items()
        if _COUNT.search(k)
        and not _NOT_COUNT.search(k)
        and k not in LAYERS
        and _int(v)
        and 0 < v < layers
    }


def _run_lengths(attrs: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """Run-length patterns ([[["global", "local"], 12]]: the kinds, repeated 12 times): once each."""
    return {
        k: [[list(kinds), 1] for kinds, _ in v]
        for k, v in attrs.items()
        if isinstance(v, list)
        and v
        and all(
            isinstance(p, list | tuple)
            and len(p) == 2
            and _int(p[1])
            and isinstance(p[0], list | tuple)
            for p in v
        )
    }


def overrides(default: Any) -> dict[str, Any]:
    """The layer count and every per-layer encoding of the kept layers."""
    attrs = vars(default)
    key = next((k for k in LAYERS if _int(attrs.get(k))), None)
    if key is None:
        return {}
    layers = attrs[key]
    keep = kept_layers(default, layers)
    patterns, runs, counts = _patterns(attrs, layers), _run_lengths(attrs), _counts(attrs, layers)
    partition = len(counts) > 1 and sum(counts.values()) == layers  # consecutive blocks of kinds
    sizes = [
        len(keep) if keep else min(layers, 2),
        *map(len, patterns.values()),
        *(sum(len(kinds) for kinds, _ in run) for run in runs.values()),
        len(counts) if partition else 0,
    ]
    if any(k.endswith("_period") and _int(v) and v > 2 for k, v in attrs.items()):
        sizes.append(
            2 * 2
        )  # two periods: a kind repeats (zamba ties its shared block from the first to the rest)
    n = min(max(sizes), layers)
    out: dict[str, Any] = {k: n for k in LAYERS if _int(attrs.get(k)) and attrs[k] > n}
    out.update(patterns)
    out.update(runs)
    if keep:
        keep = sorted([*keep, *_seconds(default, layers, keep)[: n - len(keep)]])
        per_layer = heterogeneous(default)
        if per_layer:
            out["per_layer_config"] = {
                j: per_layer[i] for j, i in enumerate(keep) if i in per_layer
            }
        out.update(
            {
                k: [v[i] for i in keep]
                for k, v in attrs.items()
                if isinstance(v, list | tuple) and len(v) == layers
            }
        )
        out.update(
            {
                k: [j for j, i in enumerate(keep) if i in members]
                for k, members in index_lists(default, layers).items()
            }
        )
    for name, value in counts.items():
        out[name] = (
            1 if partition else (min(max(1, round(value * n / layers)), n - 1) if n > 1 else value)
        )
    for name, value in attrs.items():
        if name.endswith("_period") and _int(value) and value > n >= 2:
            out[name] = 2
            offset = name[: -len("period")] + "offset"
            if _int(attrs.get(offset)):
                out[offset] = attrs[offset] % 2
        elif (
            name not in counts
            and _COUNT.search(name)
            and not _NOT_COUNT.search(name)
            and name not in LAYERS
            and _int(value)
            and value >= layers > n
        ):
            out[name] = n
    return out


def needs_attention(tiny: Any) -> dict[str, Any]:
    """Overrides that make the last layer attention when no layer of the tiny config is (see the
    module docstring); {} when some layer already is, or the config has no layer kinds."""
    kinds = _safe_layer_types(tiny)
    if not kinds or any(str(k) not in _NO_ATTENTION for k in kinds):
        return {}
    n = len(kinds)
    attrs = vars(tiny)
    for name, value in attrs.items():
        if (
            name.endswith(_INDEX_SUFFIXES)
            and ("attn" in name or "attention" in name)
            and (value is None or isinstance(value, list))
        ):
            return {name: [n - 1]}
    if isinstance(attrs.get("layer_types"), list):
        return {"layer_types": [*kinds[:-1], "full_attention"]}
    return {}
