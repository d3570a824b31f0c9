"""Flax's Gemma example model served as its example samples (google/flax `examples/gemma`:
`sampler.Sampler` over `transformer.Transformer`, as `train.py` builds it, `cache_size=1024`),
one request after another, each a batch of two prompts of their own lengths: how a user serves
a model. The sampler is the example's own code, imported from a flax snapshot's `examples/gemma`
folder named by --gemma (not in this repository): it sizes its token and logits buffers by the
longest prompt plus `total_generation_steps`, and jits its `while_loop` over them, so each new
prompt length compiles the whole decoder again.

    gemma_serve.py --gemma DIR [--layers N] [--gen 50] [--fixed TOTAL] [--rounds R]

--fixed TOTAL: the twin whose requests all ask for TOTAL - (longest prompt) new tokens, so every
buffer has one length and the sampler compiles once. Random weights (no checkpoint download); a
word-level stand-in for the example's SentencePiece vocabulary (the sampler calls its
EncodeAsIds, DecodeIds, bos_id, eos_id and pad_id only). Prints `request I ms` for each request
and `total_s` for them all (perf_counter, the sampler's own host copies ending each request).
"""

import argparse
import sys
import time
import types

import jax.numpy as jnp
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("--gemma", required=True, help="a flax snapshot's examples/gemma folder")
parser.add_argument("--layers", type=int, default=0, help="fewer layers (0: the model's 18)")
parser.add_argument(
    "--gen", type=int, default=50, help="total_generation_steps (its num_predict_steps)"
)
parser.add_argument("--fixed", type=int, default=0, help="one buffer length for every request")
parser.add_argument("--rounds", type=int, default=1, help="times through the prompts")
args = parser.parse_args()
sys.path.insert(0, args.gemma)
try:
    import sentencepiece  # noqa: F401  (the sampler imports it for its type)
except ImportError:
    sys.modules["sentencepiece"] = types.ModuleType("sentencepiece")
    sys.modules["sentencepiece"].SentencePieceProcessor = object  # type: ignore[attr-defined]

import sampler as sampler_lib  # noqa: E402  (the example's own module)
import transformer as transformer_lib  # noqa: E402
from gemma_config import VOCAB, gemma3_270m  # noqa: E402
from transformer_cfg import ShardingConfig  # noqa: E402

PROMPTS = [  # the tutorial's two prompts first, then others a user might send
    "\n# Python program for implementation of Bubble Sort\n\ndef bubbleSort(arr):",
    "What are the planets of the solar system?",
    "Translate to French: the weather is nice today",
    "Write a haiku about the sea",
    "Summarize the following text in one sentence: the committee met on Tuesday to review "
    "the budget, and after a long discussion it approved the plan for the new library",
    "Who wrote Pride and Prejudice?",
    "Explain why the sky is blue to a five year old child in three short sentences",
    "List three prime numbers",
    "What is the capital of Australia and why was it chosen over Sydney and Melbourne?",
    "Give me a recipe for pancakes",
    "def fibonacci(n):",
    "Describe the water cycle, including evaporation, condensation, precipitation and "
    "collection, for a school report",
]


class WordVocab:
    """Words to ids by a table grown as words arrive (ids 3 and up; 0 pad, 1 eos, 2 bos)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def pad_id(self) -> int:
        return 0

    def eos_id(self) -> int:
        return 1

    def bos_id(self) -> int:
        return 2

    def EncodeAsIds(self, text: str) -> list[int]:  # noqa: N802  (SentencePiece's name)
        out = []
        for word in text.split():
            if word not in self.ids:
                self.ids[word] = 3 + len(self.ids) % (VOCAB - 3)
                self.words[self.ids[word]] = word
            out.append(self.ids[word])
        return out

    def DecodeIds(self, ids: list[int]) -> str:  # noqa: N802
        return " ".join(self.words.get(i, "?") for i in ids)


config = gemma3_270m(transformer_lib, ShardingConfig, jnp.bfloat16, args.layers)
model = transformer_lib.Transformer(config, rngs=nnx.Rngs(params=0))
vocab = WordVocab()
sampler = sampler_lib.Sampler(vocab=vocab, cache_size=1024)

requests = [PROMPTS[i : i + 2] for i in range(0, len(PROMPTS), 2)] * args.rounds
start = time.perf_counter()
for i, batch in enumerate(requests):
    gen = args.gen
    if args.fixed:
        gen = args.fixed - max(len(sampler.tokenize(p)) for p in batch)
    t0 = time.perf_counter()
    out = sampler(  # as train.py samples its config's prompts
        batch,
        total_generation_steps=gen,
        temperature=0.0,
        top_p=0.95,
        seed=jnp.array(0),
        echo=True,
        dtype=jnp.bfloat16,
        transformer=model,
    )
    print(f"request {i} ms {1e3 * (time.perf_counter() - t0):.1f} tokens {len(out.tokens[0])}")
print(f"total_s {time.perf_counter() - start:.3f}")
