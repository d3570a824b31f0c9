"""The `tensorcore` scenario's config and truth: the model's real default widths, less depth.

A TensorCore problem is a property of matmul widths (head_dim narrower than the MXU, a hidden
size / FFN / vocabulary that is not a multiple of its edge, f32 operands, fewer rows than the
edge), never of depth or expert count: the config keeps every width of the type's default and
only loses layers (one of each kind, tpuscope/zoo/layers.py) and experts (at most 4, or top-k).
`expected(config)` is the truth read from the config alone, per target generation, without
tpuscope: what a correct lint must report for the traced step (bfloat16, 1 x LENGTH tokens).
"""

from __future__ import annotations

import re
from typing import Any

from tpuscope.zoo import layers
from tpuscope.zoo.shrink import POSITION_KEYS, _as_fields

EDGE = {"v4": 128, "v5e": 128, "v5p": 128, "v6e": 256, "v7": 256}  # MXU edge (analyze/mxu.py)
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOPK = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token", "moe_top_k")


def model_class(class_name: str) -> Any:
    import transformers

    return getattr(transformers, class_name)


def full_width_config(model_type: str, class_name: str) -> Any:
    """The default config with its widths, one layer of each kind and at most 4 experts."""
    from transformers import CONFIG_MAPPING

    from tpuscope.zoo.configs import for_class

    config_class = CONFIG_MAPPING[model_type]
    default = config_class()
    attrs = vars(default)
    topk = max([attrs[k] for k in _TOPK if isinstance(attrs.get(k), int)] or [1])
    out = dict(layers.overrides(default))
    out.update(
        {
            k: max(4, topk)
            for k in _EXPERTS
            if isinstance(attrs.get(k), int) and attrs[k] > max(4, topk)
        }
    )
    return for_class(config_class(**_as_fields(default, out)), class_name)


def positions(config: Any, length: int) -> int:
    """`length`, or fewer when the config's position table is shorter (bert-generation's default
    has 512 positions: 1024 tokens would not broadcast against them). Looks in the text config
    too (a composite config's language model)."""
    for part in (config, getattr(config, "text_config", None)):
        for key in POSITION_KEYS:
            value = getattr(part, key, None)
            if isinstance(value, int) and 0 < value < length:
                return value
    return length


# a hybrid model's SSM head width (its state-space matmuls contract over it like attention's
# head_dim): falcon_h1's default mamba_d_head is 8
SSM_HEAD_DIMS = ("mamba_d_head", "mamba_head_dim", "mamba_headdim", "ssm_head_dim")


def summary(config: Any) -> dict[str, Any]:
    """The widths the truth is read from."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", None)
    heads = getattr(text, "num_attention_heads", None)
    head_dim = getattr(text, "head_dim", None) or (hidden // heads if hidden and heads else None)
    ssm_head_dim = next(
        (v for k in SSM_HEAD_DIMS if isinstance(v := getattr(text, k, None), int)), None
    )
    return {
        "hidden": hidden,
        "heads": heads,
        "head_dim": head_dim,
        "ssm_head_dim": ssm_head_dim,
        "ffn": getattr(text, "intermediate_size", None),
        "vocab": getattr(text, "vocab_size", None),
    }


_DEF = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\w+)\[")
_OPERAND = r"(?:(\w+)\[[^\]]*\]\S*\s+)?%?([\w.\-]+)"  # an operand, its type inline or not
_DOT = re.compile(
    r"^\s*(?:ROOT )?%?[\w.\-]+ = \w+\[[^=]*? dot\(" + _OPERAND + r",\s*" + _OPERAND + r"\)"
)
MIN_WASTE = (
    0.01  # tpuscope's documented threshold (detect/tensorcore.py MIN_SHARE): below 1%, no finding
)


def f32_dots(hlo_text: str) -> int:
    """Dot instructions whose two operands are f32, in an HLO module's text (operand types inline,
    as torch_xla prints them, or looked up from their definitions, as XLA's dumps have them)."""
    types = {m.group(1): m.group(2) for line in hlo_text.splitlines() if (m := _DEF.match(line))}
    count = 0
    for line in hlo_text.splitlines():
        if m := _DOT.match(line):
            a, b = m.group(1) or types.get(m.group(2)), m.group(3) or types.get(m.group(4))
            count += a == b == "f32"
    return count


def padding(width: int, edge: int) -> float:
    """The share of a width's MXU tiles that is padding (50257 on 128: 0.09%)."""
    return (-width % edge) / width


def expected(config: Any, f32: int = 0) -> dict[str, list[str]]:
    """Per target: the problem kinds the widths imply (head_dim < edge; a hidden, FFN or vocabulary
    width padded by >= 1% to the edge: below that tpuscope's rule reports nothing, by design), and
    f32 when the traced graph has f32 dots. 1 x 1024 rows: no short M."""
    sizes = summary(config)
    out = {}
    for target, edge in EDGE.items():
        kinds = []
        if any(isinstance(sizes[k], int) and sizes[k] < edge for k in ("head_dim", "ssm_head_dim")):
            kinds.append("head_dim")
        if any(
            isinstance(sizes[k], int) and padding(sizes[k], edge) >= MIN_WASTE
            for k in ("hidden", "ffn", "vocab")
        ):
            kinds.append("unaligned")
        if f32:
            kinds.append("f32")
        out[target] = sorted(kinds)
    return out
