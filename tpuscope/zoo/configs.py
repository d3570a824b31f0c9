"""Tiny models from each model type's own default config, scaled down by its architectural rules.

A model type's default config is the real architecture (its attention kind, rope settings, MoE
routing, per-layer attention types); the zoo keeps all of that and shrinks only sizes: 1-2
layers (more when the per-layer lists hold more distinct kinds: one layer of each kind is
kept), hidden 64 with 4 query heads of head_dim 16, key/value heads in the config's own
grouping (MQA stays 1, GQA becomes 2), small FFN and vocabulary, 4 experts with top-2 routing.
The sizes are passed to the config's constructor, so whatever the config derives from them
(layer_types, head_dim, rope) is derived again. The parameter count is estimated on the meta
device first: a build that would not be tiny is refused with its count, never run.
"""

from __future__ import annotations

import re
from typing import Any

HIDDEN, HEADS, HEAD_DIM, FFN, VOCAB, POSITIONS = 64, 4, 16, 128, 512, 256
MAX_PARAMS = 20_000_000  # a tiny model here has a few hundred thousand; more means a size was left full
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
          "num_decoder_layers", "num_encoder_layers", "text_num_hidden_layers")
_SIZES: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "embed_dim", "model_dim", "dim", "hidden_dim",
                     "word_embed_proj_dim", "embedding_size", "projection_dim"), HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "num_attention_heads_per_layer"), HEADS),
    **dict.fromkeys(("head_dim", "attention_head_dim", "kv_channels", "attention_head_size", "d_kv"), HEAD_DIM),
    **dict.fromkeys(("intermediate_size", "n_inner", "ffn_dim", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim",
                     "ffn_hidden_size", "mlp_dim", "inner_hidden_size", "feed_forward_proj_dim"), FFN),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                     "moe_ffn_hidden_size", "shared_intermediate_size", "moe_shared_expert_intermediate_size",
                     "intermediate_size_mlp"), FFN // 2),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("n_group", "topk_group", "n_shared_experts", "num_shared_experts"), 1),
    "kv_lora_rank": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state", "d_state"), 16),
    **dict.fromkeys(("linear_num_key_heads", "linear_num_value_heads", "mamba_n_heads"), HEADS),
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim", "mamba_d_head", "mamba_headdim"), HEAD_DIM),
    "vocab_size": VOCAB,
}
_TOPK = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts", "moe_k", "num_experts_per_token")
_POSITIONS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx", "max_sequence_length")
_GENERIC = ((re.compile(r"vocab"), VOCAB), (re.compile(r"(ffn|intermediate|inner)"), FFN),
            (re.compile(r"(hidden|emb|embed).*(size|dim)|(size|dim).*(hidden|global)|_dim$"), HIDDEN),
            (re.compile(r"channel"), HIDDEN))
_KV = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "num_key_value_groups")


_ID_KEYS = ("token_id", "token_index", "token_ids", "_id")


class NotTiny(ValueError):
    """A scaled-down config that would still build a model too large to run here."""


def _index_lists(default: Any, layers: int) -> dict[str, list[int]]:
    """Lists of layer indices (attn_layer_indices, full_attn_idxs, ...): which layers are of a kind."""
    return {k: list(v) for k, v in vars(default).items()
            if k.endswith(("indices", "idxs", "layer_ids")) and isinstance(v, list | tuple) and v
            and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in v)}


def _layer_indices(default: Any, layers: int) -> list[int] | None:
    """One layer of each distinct kind in the config's per-layer lists and layer-index lists (at
    least 2 layers, at most 4), or None when the config has neither."""
    lists = [v for v in vars(default).values()
             if isinstance(v, list | tuple) and len(v) == layers and layers > 2]
    lists += [[i in members for i in range(layers)] for members in _index_lists(default, layers).values()]
    if not lists or layers <= 2:
        return None
    firsts: dict[Any, int] = {}
    for i, kinds in enumerate(zip(*lists, strict=True)):
        firsts.setdefault(repr(kinds), i)
    keep = sorted(firsts.values())[:4]
    for i in range(layers):  # at least 2 layers
        if len(keep) >= min(2, layers):
            break
        if i not in keep:
            keep = sorted([*keep, i])
    return keep


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


def overrides(default: Any) -> dict[str, Any]:
    """The constructor arguments that shrink one config (recursing into its sub-configs)."""
    from transformers import PretrainedConfig

    attrs = vars(default)
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, PretrainedConfig):
            out[key] = {"model_type": getattr(value, "model_type", None), **overrides(value)}
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if key in _SIZES and value > _SIZES[key]:
            out[key] = _SIZES[key]
        elif key in _TOPK and value > 2:
            out[key] = 2
        elif key in _POSITIONS and value > POSITIONS:
            out[key] = POSITIONS
        elif key not in _SIZES and not key.endswith(_ID_KEYS) and not key.startswith("num_"):
            size = next((v for pattern, v in _GENERIC if pattern.search(key)), None)
            if size is not None and value > max(size, 256):
                out[key] = size
    heads = attrs.get("num_attention_heads", attrs.get("n_head", HEADS))
    for key in _KV:
        value = attrs.get(key)
        if isinstance(value, int) and value > 0 and key != "num_key_value_groups":
            out[key] = 1 if value == 1 else (HEADS if value >= heads else 2)
    for key in ("head_dim", "moe_intermediate_size"):  # None = "derive it": some models cannot
        if key in attrs and attrs[key] is None:
            out[key] = _SIZES[key]
    for key in ("num_key_value_heads",):  # None = as many as the query heads
        if key in attrs and attrs[key] is None:
            out[key] = HEADS
    out.update(_ssm(attrs))
    layers_key = next((k for k in LAYERS if isinstance(attrs.get(k), int)), None)
    if layers_key:
        layers = attrs[layers_key]
        keep = _layer_indices(default, layers)
        n = len(keep) if keep else min(layers, 2)
        for key in LAYERS:
            if isinstance(attrs.get(key), int) and attrs[key] > n:
                out[key] = n
        if keep:
            for key, value in attrs.items():
                if isinstance(value, list | tuple) and len(value) == layers:
                    out[key] = [value[i] for i in keep]
            for key, members in _index_lists(default, layers).items():
                out[key] = [n for n, i in enumerate(keep) if i in members]
    head_dim = out.get("head_dim", HEAD_DIM)
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(attrs.get(key), dict) and _rope(attrs[key], head_dim) != attrs[key]:
            out[key] = _rope(attrs[key], head_dim)
    out.update(_token_ids(attrs, out.get("vocab_size", attrs.get("vocab_size"))))
    return out


def _ssm(attrs: dict[str, Any]) -> dict[str, Any]:
    """Mamba's rule: heads x head dim = expand x hidden (the SSM's inner width)."""
    out: dict[str, Any] = {}
    for expand, heads, head_dim in (("expand", "num_heads", "head_dim"),
                                    ("mamba_expand", "mamba_n_heads", "mamba_d_head")):
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
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
            out[key] = next(spare)
        elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab for v in value):
            out[key] = [v for v in value if isinstance(v, int) and v < vocab] or [2]
    return out


def tiny_config(model_type: str, decoder: bool = False) -> Any:
    """The model type's default config, shrunk (see the module docstring); `decoder` sets
    is_decoder where the config has it (a BERT-like type registered as a causal LM)."""
    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    default = config_class()
    extra = {"is_decoder": True} if decoder and hasattr(default, "is_decoder") else {}
    return config_class(**overrides(default), **extra)


def for_class(config: Any, class_name: str) -> Any:
    """The config the class takes: a composite config's text config when the class is its text
    model (transformers registers e.g. qwen3_5's causal LM under the composite type)."""
    wanted = getattr(model_class(class_name), "config_class", None)
    if wanted is None or isinstance(config, wanted) or not hasattr(config, "get_text_config"):
        return config
    text = config.get_text_config()
    return text if isinstance(text, wanted) else config


def model_class(class_name: str) -> Any:
    import transformers

    return getattr(transformers, class_name)


def count_params(config: Any, class_name: str) -> int:
    """Parameters of the model this config builds, counted on the meta device (no memory, no init)."""
    import torch

    with torch.device("meta"):
        model = model_class(class_name)(for_class(config, class_name))
    return sum(p.numel() for p in model.parameters())


def build(model_type: str, class_name: str, decoder: bool = False,
          max_params: int = MAX_PARAMS) -> tuple[Any, Any, int]:
    """(config, model on the CPU with random weights, parameter count): refused (NotTiny) before
    any weight is allocated when the meta-device count exceeds max_params."""
    import torch

    config = for_class(tiny_config(model_type, decoder), class_name)
    params = count_params(config, class_name)
    if params > max_params:
        raise NotTiny(f"{model_type}: {params:,} parameters after shrinking (limit {max_params:,})")
    torch.manual_seed(0)
    return config, model_class(class_name)(config), params
