"""Hugging Face `generate()` on the XLA device: a tiny random-init GPT-2, 3 requests of different lengths.

Idiom: transformers' own usage of causal LMs (`model.generate(**inputs, max_new_tokens=...,
do_sample=False)` with an attention mask, the model moved with `.to(device)`), as users serve a
model on torch_xla without a static cache or prompt padding. The config is tiny (1 layer,
n_embd 64) and the weights random: no hub download. Three requests with prompt lengths 5, 9
and 13. In the corpus because tpuscope extended warm-up past the last step of such a run while
`aten::isin` fell back 21 times: the truth is the compiles per request, the `aten::*` fallback
counters and the `_local_scalar_dense` value reads.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel

PROMPT_LENGTHS, NEW_TOKENS = (5, 9, 13), 3


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=1, n_head=2,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = GPT2LMHeadModel(config).to(device).eval()
    for request, length in enumerate(PROMPT_LENGTHS):
        hook.mark(f"request:{request}")
        input_ids = torch.randint(3, 256, (1, length)).to(device)
        attention_mask = torch.ones_like(input_ids)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)  # corpus: generate
        print(f"request {request}: prompt {length} -> {out.shape[1]} tokens: {out[0, length:].tolist()}")  # corpus: print
    hook.finish(iterations=len(PROMPT_LENGTHS))


if __name__ == "__main__":
    main()
