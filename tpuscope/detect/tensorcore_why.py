"""What a measured TensorCore card says its cost is (detect/tensorcore_ops.py's cards): the
f32 cause's and the narrow head's reasoning, with what each leaves out."""

from __future__ import annotations

from tpuscope.analyze.chips import Chip
from tpuscope.analyze.mxu import fmt_time


def f32_why(info: dict, chip: Chip) -> str:
    """The f32 card's cost: the matmuls' f32 passes and the traffic of the ops around them."""
    around = info.get("ops_around", 0)
    return (
        "the f32 passes and traffic: in bf16 the same matmuls would take max(FLOPs / "
        f"{chip.peak_flops / 1e12:.0f} TFLOP/s, bytes / 2 / {chip.hbm_bandwidth / 1e9:.0f} GB/s)"
        + (
            f", and the {around} ops around them that move their f32 activations and "
            "gradients (normalization, activations, pooling, copies; not the step's "
            "parameters and optimizer state, which stay f32) would move half those bytes, "
            f"{fmt_time(info.get('around_lost_s', 0.0))} of the loss"
            if around
            else ""
        )
        + _kernels_why(info)
        + _random_bits_why(info)
    )


def head_dim_why(info: dict, chip: Chip) -> str:
    """The narrow head's cost: an estimate from the attention ops' measured time."""
    d = info["head_dim"]
    kernel = " and an attention kernel runs half as many heads" if info.get("kernels") else ""
    f32 = info.get("after_f32_s", 0.0)
    shared = (
        f", of what is left after their f32 share ({fmt_time(f32)}, on the f32 card: this "
        "attention computes in f32)"
        if f32 > 0
        else ""
    )
    return (
        f"the narrow head: at head_dim {chip.mxu} with {chip.mxu // d}x fewer heads the score "
        f"tensors shrink {chip.mxu // d}x, the matmuls lose their padding{kernel}, so the "
        f"attention's ops (its batched matmuls and kernels, and every op that makes or reads a "
        f"score tensor) would keep about {d}/{chip.mxu} of their time{shared}. An estimate, not a "
        "measurement: on a v5e four training programs' attention kept 0.34-0.42 of its time at "
        "head_dim 128, while attention timed alone kept 0.2-0.8 in training across shapes and "
        "implementations, and jax.nn.dot_product_attention's forward at seq 511 and below ran "
        "slower at head_dim 128 (docs/tpu.md); only a run at head_dim 128 measures it"
    )


def _kernels_why(info: dict) -> str:
    """What the f32 cost leaves out: Pallas kernels in f32, whose FLOPs no one counts."""
    kernels = info.get("f32_kernels") or []
    if not kernels:
        return ""
    named = ", ".join(kernels[:3]) + (f" and {len(kernels) - 3} more" if len(kernels) > 3 else "")
    return (
        f". Not counted: {len(kernels)} Pallas kernel{'s' * (len(kernels) != 1)} with f32 "
        f"arrays ({named}) took {fmt_time(info.get('f32_kernels_s', 0.0))} of the step; their "
        "matmuls run inside the kernels, where neither the HLO nor the trace counts FLOPs, so "
        "what bf16 would save there is not known (only a bf16 run measures it)"
    )


def _random_bits_why(info: dict) -> str:
    """What the f32 cost leaves out: ops making random bits (analyze/random_bits.random_bits_ops)."""
    count = info.get("random_bits_ops", 0)
    if not count:
        return ""
    return (
        f". Not counted: {count} op{'s' * (count != 1)} that make random bits with JAX's "
        f"threefry PRNG (dropout's masks, which XLA fuses into the ops that read them) took "
        f"{fmt_time(info.get('random_bits_s', 0.0))} of the step: the hashing's integer work "
        "bounds them, and bf16 does not change it (the long ones: the random-bits card)"
    )


def random_bits_why(chip: Chip) -> str:
    """The random_bits card's cost (analyze/random_bits)."""
    return (
        "the hashing of JAX's threefry PRNG, fused by XLA into the ops that read the bits "
        "(dropout's masks into the matmuls after them, made again in the backward pass): their "
        f"time less their ideal (FLOPs / {chip.peak_flops / 1e12:.0f} TFLOP/s, bytes / "
        f"{chip.hbm_bandwidth / 1e9:.0f} GB/s), about what other bits would gain. Device time: "
        "the step gains it only down to the host's own time a step, which the trace does not "
        "measure while the device bounds the step (optax's nanolm example on a v5e: the device "
        "step 6.62 -> 4.19 ms with rbg, the step 6.70 -> 5.48 ms)"
    )


RANDOM_BITS_FIX = (
    "Make the random bits with the TPU's own generator: "
    '`jax.config.update("jax_default_prng_impl", "rbg")` at the top of the program, before '
    'any key is made (or "unsafe_rbg", as T5X and MaxText do on TPUs: faster still, its key '
    "splitting untested as a PRNG); or less dropout. The random numbers change, not their "
    "distribution: a run seeded under threefry does not repeat, and rbg's bits may differ "
    "between CPU, GPU and TPU and between JAX and XLA versions."
)
