"""Training a tiny random-init Hugging Face Llama on torch_xla with padded batches and an attention mask.

Idiom: the fine-tuning loop users write around transformers models (right-padded batches of a
fixed length, `attention_mask` from the tokenizer's padding, `labels` with -100 at the pads,
`model(input_ids=..., attention_mask=..., labels=...)`, `outputs.loss.backward()`,
`xm.optimizer_step(optimizer)`, `xm.mark_step()`). Shapes are static, but transformers'
mask creation (masking_utils: `padding_mask.all()` to decide whether the mask can be skipped)
reads a value from the device inside every forward: a genuine host sync that cuts each step
into two graphs. In the corpus because value reads (`aten::_local_scalar_dense`) are host
syncs, not CPU fallbacks, and their line is the user's model call.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, SEQ, ITERATIONS = 4, 32, 8


def padded_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), generator=generator)
    input_ids = torch.randint(1, 512, (BATCH, SEQ), generator=generator)
    attention_mask = (torch.arange(SEQ)[None, :] < lengths[:, None]).long()
    input_ids = input_ids * attention_mask  # pad id 0 on the right
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return input_ids, attention_mask, labels


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    device = torch_xla.device()
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0)
    model = LlamaForCausalLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    batches = [padded_batch(generator) for _ in range(ITERATIONS)]
    for step, cpu_batch in enumerate(batches):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        input_ids, attention_mask, labels = (t.to(device) for t in cpu_batch)
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)  # corpus: model-call
        outputs.loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
        xm.mark_step()  # corpus: sync
        if step % 4 == 0:
            print(f"step {step} loss {outputs.loss.item():.4f}")
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
