"""A `torch.nn.TransformerEncoder` on torch_xla with head_dim 64 and d_model 192 (not a multiple of 128).

Idiom: the torch.nn transformer modules as users stack them (`nn.TransformerEncoderLayer(d_model,
nhead, dim_feedforward, batch_first=True)` in an `nn.TransformerEncoder`), run for batched
inference under `torch.no_grad()` with `torch_xla.sync()` after each batch (the sync idiom of
pytorch/xla's examples). d_model 192 with 3 heads gives head_dim 64; every matmul of the model
has a 192- or 384-wide dim. In the corpus because tpuscope pointed `tensorcore_underuse` at
torch's functional.py / linear.py: the line to change is the user's model call (and its config).
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla

D_MODEL, HEADS, FFN, BATCH, SEQ, ITERATIONS = 192, 3, 384, 4, 64, 6


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=FFN, batch_first=True)  # corpus: config
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to(device).eval()
    batches = [torch.randn(BATCH, SEQ, D_MODEL) for _ in range(ITERATIONS)]
    with torch.no_grad():
        for step, batch in enumerate(batches):  # corpus: loop
            hook.mark(f"infer:i{step}")
            out = model(batch.to(device))  # corpus: model-call
            torch_xla.sync()
            if step % 3 == 0:
                print(f"step {step} mean {out.mean().item():.4f}")
    hook.finish(iterations=ITERATIONS, head_dim=D_MODEL // HEADS)


if __name__ == "__main__":
    main()
