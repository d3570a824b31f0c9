"""Training steps of a tiny random-init Hugging Face Llama on torch_xla, static shapes.

Idiom: a causal-LM pretraining loop as users write it around transformers models on torch_xla
(`LlamaForCausalLM(config).to(device)`, `outputs = model(input_ids=..., labels=...)` on packed
sequences of one length, without an attention mask, `outputs.loss.backward()`, AdamW through
`xm.optimizer_step`, `xm.mark_step()`, `loss.item()` logged every LOG_STEPS steps). Config is
tiny (2 layers, hidden 128), weights random, no hub download. In the corpus as a clean
transformers program: the graph is static and a correct tool finds nothing.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, SEQ, ITERATIONS, LOG_STEPS = 4, 32, 10, 5


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    batches = [torch.randint(0, 512, (BATCH, SEQ)) for _ in range(ITERATIONS)]
    for step, cpu_ids in enumerate(batches):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        input_ids = cpu_ids.to(device)
        outputs = model(input_ids=input_ids, labels=input_ids)  # corpus: model-call
        outputs.loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        xm.mark_step()  # corpus: sync
        if step % LOG_STEPS == 0:
            print(f"step {step} loss {outputs.loss.item():.4f}")  # corpus: loss-item
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
