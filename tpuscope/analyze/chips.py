"""TPU generations by name, apart from the MXU arithmetic (mxu) so that checking
`tpuscope run --target` imports neither numpy nor pandas."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TARGET = "v5e"
TARGETS = ("v5e", "v5p", "v6e", "v7")


@dataclass(frozen=True)
class Chip:
    """One TPU generation, per chip (docs/tpu_generations.md cites each figure)."""

    name: str
    mxu: int  # systolic array edge
    peak_flops: float  # bf16 FLOP/s
    hbm_bandwidth: float  # bytes/s


GENERATIONS: dict[str, Chip] = {
    "v4": Chip("TPU v4", 128, 275e12, 1200e9),
    "v5e": Chip("TPU v5e", 128, 197e12, 819e9),
    "v5p": Chip("TPU v5p", 128, 459e12, 2765e9),
    "v6e": Chip("TPU v6e (Trillium)", 256, 918e12, 1638e9),
    "v7": Chip("TPU7x (Ironwood)", 256, 2307e12, 7380e9),
}


def _key(target: str | None) -> str:
    key = (target or DEFAULT_TARGET).lower().removeprefix("tpu").lstrip("-_ ")
    if key not in GENERATIONS:
        raise ValueError(f"unknown TPU target {target!r}: use one of {', '.join(GENERATIONS)}")
    return key


def chip(target: str | None) -> Chip:
    return GENERATIONS[_key(target)]
