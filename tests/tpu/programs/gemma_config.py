"""gemma3_270m's config as google/flax `examples/gemma`'s `train.py` builds it (lm1b's vocabulary,
one chip, no sharding), shared by gemma_train.py and gemma_serve.py. The example's own
`transformer` module is passed in: it is imported from a flax snapshot, not this repository."""

from typing import Any

VOCAB = 35_008  # the example's default vocab_size (lm1b's sentencepiece model)


def gemma3_270m(transformer_lib: Any, sharding: Any, dtype: Any, layers: int = 0) -> Any:
    """The config; `layers` > 0 cuts the model to its first `layers` layers (a CPU try)."""
    override: dict[str, Any] = {"num_layers": layers} if layers else {}
    if layers:
        base = transformer_lib.TransformerConfig.gemma3_270m()
        override["attention_types"] = tuple(base.attention_types)[:layers]
    return transformer_lib.TransformerConfig.from_version_name(
        "gemma3_270m",
        num_embed=VOCAB,
        dtype=dtype,
        shd_config=sharding.no_sharding(),
        **override,
    )
