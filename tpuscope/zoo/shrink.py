"""The rules that scale one default config down: which constructor arguments, to what.

Each rule is a property of the architecture kept while sizes shrink, never a model type's name:
- only the config's constructor fields are passed: an attribute the config derives in
  __post_init__ (deepseek_v3's head_dim = qk_rope_head_dim, falcon_mamba's intermediate size)
  is derived again from the shrunk fields;
- sizes (hidden 64, 4 heads of 16, FFN 128, vocabulary 512), lists of per-layer sizes each;
  a width equal to any hidden size of the config tree stays equal to it (an adapter's input is
  the audio tower's hidden size, its output the text model's);
- groupings kept: key/value heads and SSM groups as MQA / grouped / one per head;
- dims that are a fraction of the head dim (rotary_dim) keep their fraction; a head_dim equal to
  qk_rope_head_dim (MLA, where a field) stays equal to it;
- MoE: 4 experts, top-2, one group; a routing count the default leaves None (a default that
  cannot route) gets the tiny value;
- sliding windows and attention chunks below every scenario's sequence (8 < 16 tokens, the
  prompt's 8 + 4 new), so sliding attention is exercised, not skipped;
- layers (layers.py): one layer of each distinct kind, and at least one attention layer.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeGuard

from tpuscope.zoo import layers as layer_rules
from tpuscope.zoo import stages

HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB, POSITIONS, WINDOW = 64, 4, 16, 128, 512, 256, 8
_HIDDEN_KEYS = (
    "hidden_size",
    "n_embd",
    "d_model",
    "embed_dim",
    "model_dim",
    "dim",
    "hidden_dim",
    "word_embed_proj_dim",
    "embedding_size",
    "projection_dim",
)
_SIZES: dict[str, int] = {
    **dict.fromkeys(_HIDDEN_KEYS, HIDDEN),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "num_heads",
            "n_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "num_attention_heads_per_layer",
            "linear_num_heads",
        ),
        HEADS,
    ),
    **dict.fromkeys(
        (
            "head_dim",
            "attention_head_dim",
            "kv_channels",
            "attention_head_size",
            "d_kv",
            "linear_head_dim",
        ),
        HEAD_DIM,
    ),
    **dict.fromkeys(
        (
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "d_ff",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "ffn_hidden_size",
            "mlp_dim",
            "inner_hidden_size",
            "feed_forward_proj_dim",
        ),
        FFN,
    ),
    **dict.fromkeys(
        (
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_intermediate_size",
            "moe_ffn_hidden_size",
            "shared_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "intermediate_size_mlp",
            "expert_ffn_hidden_size",
            "shared_experts_intermediate_size",
        ),
        FFN // 2,
    ),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(
        (
            "n_group",
            "topk_group",
            "num_expert_group",
            "n_shared_experts",
            "num_shared_experts",
            "moe_num_shared_experts",
            "zero_expert_num",
        ),
        1,
    ),
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "o_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state", "d_state"), 16),
    **dict.fromkeys(("linear_num_key_heads", "linear_num_value_heads", "mamba_n_heads"), HEADS),
    **dict.fromkeys(
        ("linear_key_head_dim", "linear_value_head_dim", "mamba_d_head", "mamba_headdim"), HEAD_DIM
    ),
    "vocab_size": VOCAB,
}
_TOPK = (
    "num_experts_per_tok",
    "moe_topk",
    "top_k",
    "num_selected_experts",
    "moe_k",
    "num_experts_per_token",
    "moe_top_k",
    "top_k_experts",
)
# MoE routing counts: a None here is a default that cannot route (topk(k=None), empty(None, ...))
_ROUTING = {**{k: 2 for k in _TOPK}, "n_routed_experts": 4, "n_shared_experts": 1}
POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "n_ctx",
    "max_sequence_length",
)
_GENERIC = (
    (re.compile(r"vocab"), VOCAB),
    (re.compile(r"(ffn|intermediate|inner)"), FFN),
    (re.compile(r"(hidden|emb|embed).*(size|dim)|(size|dim).*(hidden|global)|_dim$"), HIDDEN),
    (re.compile(r"channel"), HIDDEN),
)
_GROUPED = (
    "num_key_value_heads",
    "num_kv_heads",
    "n_kv_heads",
    "multi_query_group_num",
    "n_groups",
    "mamba_n_groups",
    "mamba_ngroups",
    "num_query_groups",
)
_HEAD_FRACTIONS = ("rotary_dim", "rotary_emb_dim", "rope_dim")
_WINDOWS = re.compile(
    r"^(sliding_window(_size)?|attention_window(_size)?|window_size|local_attention"
    r"(_window_len)?|attention_chunk_size)$"
)
_WIDTH = re.compile(r"(size|dim)$")
_ID_KEYS = ("token_id", "token_index", "token_ids", "_id")


def fields(config: Any) -> set[str]:
    """The constructor's fields (transformers 5 configs are dataclasses); every attribute when not."""
    if dataclasses.is_dataclass(config):
        return {f.name for f in dataclasses.fields(config)}
    return set(vars(config))


def _derived(config: Any) -> set[str]:
    """Width fields the default leaves None and __post_init__ fills from other sizes (zamba's
    attention_head_dim = 2 x hidden / heads): passed as None, they are derived again."""
    if not dataclasses.is_dataclass(config):
        return set()
    return {
        f.name
        for f in dataclasses.fields(config)
        if f.default is None
        and _WIDTH.search(f.name)
        and f.name not in ("head_dim",)
        and _is_int(getattr(config, f.name, None))
    }


def hidden_sizes(config: Any) -> set[int]:
    """Every hidden size in the config tree (the root's and each sub-config's)."""
    from transformers import PretrainedConfig

    found = {v for k, v in vars(config).items() if k in _HIDDEN_KEYS and isinstance(v, int)}
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            found |= hidden_sizes(value)
    return found


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(key: str, value: int, widths: set[int]) -> int | None:
    """The tiny value of one int field, or None to leave it."""
    if key in _SIZES:
        return _SIZES[key] if value > _SIZES[key] else None
    if key in _TOPK:
        return 2 if value > 2 else None
    if key in POSITION_KEYS:
        return POSITIONS if value > POSITIONS else None
    if _WINDOWS.match(key):
        return WINDOW if value >= 2 * WINDOW else None
    if key.endswith(_ID_KEYS) or key.startswith("num_"):
        return None
    if value in widths and _WIDTH.search(key) and "vocab" not in key:
        return HIDDEN  # mirrors a hidden size
    size = next((v for pattern, v in _GENERIC if pattern.search(key)), None)
    return size if size is not None and value > max(size, 256) else None


def _shrunk(values: dict[str, Any], widths: set[int]) -> dict[str, Any]:
    """One layer's overrides with every size shrunk (the others kept)."""
    return {k: (_size(k, v, widths) or v) if _is_int(v) else v for k, v in values.items()}


def _head_dim(attrs: dict[str, Any]) -> int | None:
    if _is_int(attrs.get("head_dim")):
        return attrs["head_dim"]
    hidden = next((attrs[k] for k in _HIDDEN_KEYS if _is_int(attrs.get(k))), None)
    heads = next(
        (attrs[k] for k in ("num_attention_heads", "n_head", "num_heads") if _is_int(attrs.get(k))),
        None,
    )
    return hidden // heads if hidden and heads else None


def _grouped(attrs: dict[str, Any]) -> dict[str, int]:
    """Key/value heads (and SSM groups) in the config's own grouping: 1 stays 1 (MQA), as many as
    the query heads stays so (MHA), anything between becomes 2 (grouped)."""
    heads = next(
        (
            attrs[k]
            for k in ("num_attention_heads", "n_head", "mamba_n_heads", "num_heads")
            if _is_int(attrs.get(k))
        ),
        HEADS,
    )
    out = {}
    for key in _GROUPED:
        value = attrs.get(key)
        if _is_int(value) and value > 0:
            out[key] = 1 if value == 1 else (HEADS if value >= heads else 2)
    return out


def overrides(default: Any, widths: set[int] | None = None) -> dict[str, Any]:
    """The constructor arguments that shrink one config (recursing into its sub-configs)."""
    from transformers import PretrainedConfig

    attrs = vars(default)
    if widths is None and stages.is_staged(attrs):
        # the model's own config is a backbone of stages: its own scale-down (stages.py); a
        # staged sub-config keeps these rules, its widths being tied to the rest of the tree
        return _as_fields(default, stages.overrides(attrs))
    widths = hidden_sizes(default) if widths is None else widths
    out: dict[str, Any] = {}
    derived = _derived(default)
    for key, value in attrs.items():
        if key in derived:
            continue  # the config derives it from the shrunk fields again
        if isinstance(value, PretrainedConfig):
            out[key] = {
                "model_type": getattr(value, "model_type", None),
                **overrides(value, widths),
            }
        elif value is None and key in _ROUTING:
            out[key] = _ROUTING[key]
        elif _is_int(value):
            size = _size(key, value, widths)
            if size is not None:
                out[key] = size
        elif isinstance(value, list) and value and all(_is_int(v) for v in value) and key in _SIZES:
            out[key] = [min(v, _SIZES[key]) for v in value]  # per-layer sizes
    out.update(_grouped(attrs))
    for key in (
        "head_dim",
        "moe_intermediate_size",
        "num_key_value_heads",
    ):  # None = "derive it": some cannot
        if key in attrs and attrs[key] is None:
            out[key] = HEADS if key == "num_key_value_heads" else _SIZES[key]
    if _is_int(attrs.get("head_dim")) and attrs.get("head_dim") == attrs.get("qk_rope_head_dim"):
        out["head_dim"] = out.get(
            "qk_rope_head_dim", attrs["head_dim"]
        )  # MLA: the rope part is the head dim
    old_head = _head_dim(attrs)
    for key in _HEAD_FRACTIONS:
        if _is_int(attrs.get(key)) and old_head:
            out[key] = max(2, 2 * round(attrs[key] * HEAD_DIM / old_head / 2))
    out.update(_ssm(attrs))
    out.update(_factors(attrs))
    if "default_language" in attrs and attrs["default_language"] is None and attrs.get("languages"):
        out["default_language"] = list(attrs["languages"])[
            0
        ]  # a choice the model cannot run without (xmod)
    out.update(layer_rules.overrides(default))
    if (
        "per_layer_config" in out
    ):  # a heterogeneous config: each kept layer's overrides shrunk the same way
        out["per_layer_config"] = {
            i: {**_shrunk(layer, widths), **_grouped({**attrs, **layer})}
            for i, layer in out["per_layer_config"].items()
        }
    for key, value in out.items():  # per-layer sizes (the kept layers' list), each shrunk
        if isinstance(value, list) and key in _SIZES and all(_is_int(v) for v in value):
            out[key] = [min(v, _SIZES[key]) for v in value]
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(attrs.get(key), dict) and _rope(attrs[key], HEAD_DIM) != attrs[key]:
            out[key] = _rope(attrs[key], HEAD_DIM)
    out.update(_token_ids(attrs, out.get("vocab_size", attrs.get("vocab_size"))))
    return _as_fields(default, out)


def _as_fields(default: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Only constructor fields, each under its field name (attribute_map aliases point either way)."""
    keep = fields(default) | {"per_layer_config"}
    aliases = getattr(default, "attribute_map", {}) or {}
    names = {
        **{target: alias for alias, target in aliases.items() if alias in keep},
        **{alias: target for alias, target in aliases.items() if target in keep},
        **{k: k for k in keep},
    }
    return {names[k]: v for k, v in out.items() if k in names}


def _rope(value: Any, head_dim: int) -> Any:
    """Rope settings kept, with an mrope section rescaled to the new head_dim (it sums to head_dim/2)."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    section = out.get("mrope_section")
    if isinstance(section, list | tuple) and section and sum(section) > 0:
        half, total = head_dim // 2, sum(section)
        scaled = [max(1, s * half // total) for s in section]
        scaled[0] += half - sum(scaled)
        out["mrope_section"] = scaled
    for key in ("original_max_position_embeddings",):
        if isinstance(out.get(key), int) and out[key] > POSITIONS:
            out[key] = POSITIONS // 2
    return out


def _factors(attrs: dict[str, Any]) -> dict[str, Any]:
    """Tuples that split a size (reformer's axial position embeddings): parts summing to the
    hidden size keep summing to it, factors multiplying to the position count keep multiplying
    to it (one even split each)."""
    hidden = next((attrs[k] for k in _HIDDEN_KEYS if _is_int(attrs.get(k))), None)
    positions = next((attrs[k] for k in POSITION_KEYS if _is_int(attrs.get(k))), None)
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if not (
            isinstance(value, list | tuple) and len(value) > 1 and all(_is_int(v) for v in value)
        ):
            continue
        n = len(value)
        if hidden and hidden > HIDDEN and sum(value) == hidden:
            out[key] = [HIDDEN // n] * (n - 1) + [HIDDEN - HIDDEN // n * (n - 1)]
        elif positions and positions > POSITIONS and n == 2 and value[0] * value[1] == positions:
            out[key] = [16, POSITIONS // 16]
    return out


def _ssm(attrs: dict[str, Any]) -> dict[str, Any]:
    """Mamba's rule: heads x head dim = expand x hidden (the SSM's inner width)."""
    out: dict[str, Any] = {}
    for expand, heads, head_dim in (
        ("expand", "num_heads", "head_dim"),
        ("mamba_expand", "mamba_n_heads", "mamba_d_head"),
    ):
        if isinstance(attrs.get(expand), int) and head_dim in attrs and heads in attrs:
            out[heads] = HEADS
            out[head_dim] = HIDDEN * attrs[expand] // HEADS
            if isinstance(attrs.get("mamba_d_ssm"), int):
                out["mamba_d_ssm"] = HIDDEN * attrs[expand]
    return out


def _token_ids(attrs: dict[str, Any], vocab: int | None) -> dict[str, Any]:
    """Special token ids moved inside the smaller vocabulary (an id past it breaks the embedding)."""
    if not isinstance(vocab, int):
        return {}
    out: dict[str, Any] = {}
    spare = iter(range(vocab - 1, 3, -1))
    for key, value in attrs.items():
        if not key.endswith(_ID_KEYS):
            continue
        if _is_int(value) and value >= vocab:
            out[key] = next(spare)
        elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab for v in value):
            out[key] = [v for v in value if isinstance(v, int) and v < vocab] or [2]
    return out
