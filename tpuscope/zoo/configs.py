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

from typing import Any

from tpuscope.zoo import layers
from tpuscope.zoo.shrink import FFN, HEAD_DIM, HEADS, HIDDEN, POSITIONS, VOCAB, WINDOW, overrides

__all__ = [
    "FFN",
    "HEAD_DIM",
    "HEADS",
    "HIDDEN",
    "POSITIONS",
    "VOCAB",
    "WINDOW",
    "NotTiny",
    "build",
    "count_params",
    "for_class",
    "overrides",
    "tiny_config",
]

MAX_PARAMS = (
    20_000_000  # a tiny model here has a few hundred thousand; more means a size was left full
)


class NotTiny(ValueError):
    """A scaled-down config that would still build a model too large to run here."""


def tiny_config(model_type: str, decoder: bool = False) -> Any:
    """The model type's default config, shrunk (see the module docstring); `decoder` sets
    is_decoder where the config has it (a BERT-like type registered as a causal LM)."""
    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    default = config_class()
    extra = {"is_decoder": True} if decoder and hasattr(default, "is_decoder") else {}
    shrunk = overrides(default)
    tiny = config_class(**shrunk, **extra)
    attention = layers.needs_attention(tiny)
    return config_class(**{**shrunk, **attention}, **extra) if attention else tiny


def for_class(config: Any, class_name: str) -> Any:
    """The config the class takes: a composite config's sub-config of the class's config type when
    the class is one part (transformers registers e.g. qwen3_5's causal LM under the composite type,
    and musicgen's decoder under a config with a text encoder and a decoder: no single text config)."""
    wanted = getattr(model_class(class_name), "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    parts = [v for v in vars(config).values() if isinstance(v, wanted)]
    if len(parts) == 1:
        return parts[0]
    if not hasattr(config, "get_text_config"):
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


def build(
    model_type: str, class_name: str, decoder: bool = False, max_params: int = MAX_PARAMS
) -> tuple[Any, Any, int]:
    """(config, model on the CPU with random weights, parameter count): refused (NotTiny) before
    any weight is allocated when the meta-device count exceeds max_params."""
    import torch

    config = _with_decoder_start(for_class(tiny_config(model_type, decoder), class_name))
    params = count_params(config, class_name)
    if params > max_params:
        raise NotTiny(f"{model_type}: {params:,} parameters after shrinking (limit {max_params:,})")
    torch.manual_seed(0)
    return config, model_class(class_name)(config), params


def _with_decoder_start(config: Any) -> Any:
    """An encoder-decoder whose default config leaves `decoder_start_token_id` unset (T5,
    LongT5, Switch in transformers 5: their checkpoints' configs hold it, the pad id) cannot
    shift its labels nor start generating; the tiny model gets the pad id, as those checkpoints
    do. Set before the model is built, so its generation config has it too."""
    if getattr(config, "is_encoder_decoder", False) and (
        getattr(config, "decoder_start_token_id", None) is None
    ):
        pad = getattr(config, "pad_token_id", None)
        if pad is not None:
            config.decoder_start_token_id = pad
    return config
