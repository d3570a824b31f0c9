"""Training a tiny random-init Hugging Face GPT-2 on torch_xla with variable sequence lengths, no padding.

Idiom: a causal-LM training loop over batches grouped by length and left unpadded (a collator
without `pad_to_multiple_of`), `model(input_ids=..., labels=...)`, `outputs.loss.backward()`,
`optimizer.step()`, `xm.mark_step()` ending the step, as users first port a GPU loop to
torch_xla. The lengths 16, 24 and 32 appear in turn, so every new length compiles a new graph
of the same step after warm-up. In the corpus as a genuine recompile / shape churn
driven by real code: the truth is the compiles per iteration and the lengths.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from transformers import GPT2Config, GPT2LMHeadModel

BATCH, LENGTHS = 4, (16, 16, 16, 24, 16, 32, 24, 16)


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    batches = [torch.randint(0, 256, (BATCH, length)) for length in LENGTHS]
    for step, cpu_ids in enumerate(batches):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        input_ids = cpu_ids.to(device)
        outputs = model(input_ids=input_ids, labels=input_ids)  # corpus: model-call
        outputs.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xm.mark_step()  # corpus: sync
        if step % 5 == 0:
            print(f"step {step} length {input_ids.shape[1]} loss {outputs.loss.item():.4f}")
    hook.finish(iterations=len(LENGTHS), lengths=list(LENGTHS))


if __name__ == "__main__":
    main()
