"""The bundled PyTorch workloads: an MLP, a transformer block (head_dim 64 and 128), variable length.

Each builder returns a Workload: a training-step function (forward, backward,
AdamW) and the inputs of every step, already on the device. The step never reads
a value back to the host, so the only sync per step is the one the mode makes.
Shapes come from a size preset: `tiny` for tests (seconds), `small` for the
documented benchmark. torch is imported inside the builders so the harness can
list models without importing it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SIZES: dict[str, dict[str, int]] = {
    # d_model 128 is the smallest width where one head of 128 fits, so both
    # transformer variants share every size but the head split.
    "tiny": {
        "batch": 4,
        "seq": 16,
        "d_model": 128,
        "layers": 1,
        "vocab": 128,
        "mlp_batch": 16,
        "mlp_in": 64,
        "mlp_hidden": 128,
        "mlp_classes": 10,
    },
    "small": {
        "batch": 8,
        "seq": 64,
        "d_model": 256,
        "layers": 2,
        "vocab": 512,
        "mlp_batch": 64,
        "mlp_in": 256,
        "mlp_hidden": 1024,
        "mlp_classes": 10,
    },
}

MODELS: dict[str, str] = {
    "mlp": "3-layer MLP classifier (GELU), cross-entropy, AdamW",
    "transformer": "pre-norm causal transformer LM, head_dim 64, AdamW",
    "transformer-hd128": "the same transformer with head_dim 128 (half the heads)",
    "varlen": "the head_dim-64 transformer fed batches of varying sequence length",
}

POOL = 4  # distinct batches per shape, cycled: data varies, device memory stays small


@dataclass
class Workload:
    """A step function and what to feed it; `inputs(i)` are step i's positional args."""

    step: Callable[..., Any]
    inputs: Callable[[int], tuple[Any, ...]]
    samples: Callable[[int], int]
    tokens: Callable[[int], int] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    state: Any = None  # functional backends (JAX): step(state, *args) -> (state, out)


def head_dim_of(model: str) -> int:
    return 128 if model == "transformer-hd128" else 64


def build(model: str, size: str, device: Any, seed: int = 0, steps: int = 64) -> Workload:
    """The named bundled workload on `device` (a torch.device)."""
    import torch

    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; bundled models: {', '.join(MODELS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; sizes: {', '.join(SIZES)}")
    torch.manual_seed(seed)
    dims = SIZES[size]
    if model == "mlp":
        return _mlp(dims, device)
    return _transformer(model, dims, device, seed, steps)


def _train_step(net: Any, loss_of: Callable[..., Any]) -> Callable[..., Any]:
    """One optimizer step; the loss stays on the device (no host sync)."""
    import torch

    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def step(*batch: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_of(net, *batch)
        loss.backward()
        opt.step()
        return loss

    return step


def _mlp(dims: dict[str, int], device: Any) -> Workload:
    import torch
    from torch import nn

    batch, width, hidden, classes = (
        dims["mlp_batch"],
        dims["mlp_in"],
        dims["mlp_hidden"],
        dims["mlp_classes"],
    )
    net = nn.Sequential(
        nn.Linear(width, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, classes),
    ).to(device)
    pool = [
        (torch.randn(batch, width).to(device), torch.randint(0, classes, (batch,)).to(device))
        for _ in range(POOL)
    ]
    step = _train_step(net, lambda m, x, y: nn.functional.cross_entropy(m(x), y))
    return Workload(
        step=step,
        inputs=lambda i: pool[i % POOL],
        samples=lambda i: batch,
        info={"batch": batch, "in": width, "hidden": hidden, "classes": classes},
    )


def _transformer(model: str, dims: dict[str, int], device: Any, seed: int, steps: int) -> Workload:
    import torch
    from torch import nn

    from tpuscope.bench.torch_blocks import TinyLM

    d_model, vocab, batch, seq = dims["d_model"], dims["vocab"], dims["batch"], dims["seq"]
    head_dim = head_dim_of(model)
    net = TinyLM(vocab, d_model, d_model // head_dim, dims["layers"], max_seq=seq).to(device)
    lengths = varlen_lengths(seq, steps, seed) if model == "varlen" else [seq] * steps
    pools = {
        n: [torch.randint(0, vocab, (batch, n + 1)).to(device) for _ in range(POOL)]
        for n in sorted(set(lengths))
    }

    def loss_of(m: Any, tokens: Any) -> Any:
        logits = m(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))

    def length(i: int) -> int:
        return lengths[i % len(lengths)]

    return Workload(
        step=_train_step(net, loss_of),
        inputs=lambda i: (pools[length(i)][i % POOL],),
        samples=lambda i: batch,
        tokens=lambda i: batch * length(i),
        info={
            "batch": batch,
            "seq": seq,
            "d_model": d_model,
            "head_dim": head_dim,
            "heads": d_model // head_dim,
            "layers": dims["layers"],
            "vocab": vocab,
            "seq_lengths": sorted(set(lengths)),
        },
    )


def varlen_lengths(seq: int, steps: int, seed: int) -> list[int]:
    """Sequence lengths of the variable-length workload: 5 buckets between seq/2 and seq.

    The first steps use two lengths only, so new shapes (and, in fused mode, new
    graphs) keep arriving after warm-up, as they do in real variable-length data.
    """
    buckets = [seq // 2 + k * seq // 8 for k in range(5)]
    rng = random.Random(seed)
    head = [buckets[0], buckets[-1]] * 2
    return (head + [rng.choice(buckets) for _ in range(max(steps, 8))])[: max(steps, 8)]
