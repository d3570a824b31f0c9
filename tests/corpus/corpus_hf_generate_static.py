"""Hugging Face `generate()` with a static KV cache on the XLA device: two identical requests.

Idiom: transformers' documented way to serve a causal LM on torch_xla/TPU without a recompile per
token: `model.generate(**inputs, max_new_tokens=..., do_sample=False,
cache_implementation="static")` (transformers' "static cache" / torch.compile and XLA guides), a
Llama model from a tiny `LlamaConfig` (2 layers, hidden 64) with random weights: no hub
download. Two requests with the same prompt length. In the corpus because the first request
compiles several distinct graphs at the one user line (prefill, decode, the pieces generate()
reads to decide when to stop) and the second compiles nothing: the truth is that there is no
recompile, however many graphs the first request cut.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT_LENGTH, NEW_TOKENS, REQUESTS = 6, 4, 2


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config).to(device).eval()
    prompt = torch.randint(3, 256, (1, PROMPT_LENGTH))
    for request in range(REQUESTS):
        hook.mark(f"request:{request}")
        input_ids = prompt.to(device)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False,  # corpus: generate
                                 cache_implementation="static")
        print(f"request {request}: {out[0, PROMPT_LENGTH:].tolist()}")  # corpus: print
    hook.finish(iterations=REQUESTS)


if __name__ == "__main__":
    main()
