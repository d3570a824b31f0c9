"""Make jax-ml/jax-ai-stack's tutorial "Train a miniGPT language model with JAX"
(docs/source/JAX_for_LLM_pretraining.md, written for a Colab or Kaggle TPU v5e) runnable on the
chip as a program, and the twins its truth needs, as chip_minigpt.sh runs them (the snapshot is
fetched, never committed):

    python3 minigpt.py SNAPSHOT_GIT_DIR OUT

The program is the tutorial's code cells joined in order, from its imports to its final text
generation (the `!pip`/`!wget` cells and the plotting, checkpointing and profiling cells after
training are left out). Its model is upstream's: a Flax NNX miniGPT of 4 blocks (its
`create_model`; the config's 8 goes unused), width 256, 8 heads of 32, feed-forward 256, GPT-2's 50,257-word vocabulary, float32; Grain's DataLoader in
batches of 144 stories of 256 tokens; Adam; an `nnx.jit` train_step; text generated token by
token before training, every 200 steps and at the end. The edits, each found exactly once, are
only what the chip needs (it has no network):
- TinyStories is `write_stories(DIR, COUNT)`'s stand-in, the file upstream downloads: COUNT
  stories of random words in its format (upstream: 2.1 million; chip_minigpt.sh writes 60 or
  250 batches' worth);
- GPT-2's encoding (tiktoken downloads its merges) is tiktoken's engine over a table of the same
  50,257 ids: a token per byte but the prompt's four words (so "Once upon a time" is 4 tokens,
  as in GPT-2, and the generation's inputs outgrow `maxlen` where upstream's do: its
  `generate_text` pads to `maxlen` only while the text is shorter), `<|endoftext|>` at 50256,
  the other ids decodable placeholders;
- two edits flax 0.12 needs (the tutorial's pins, flax 0.12.7, need them too): its
  layers' list is an `nnx.List`, as flax's error says, and FLAX_ALWAYS_SHARD_VARIABLE=false keeps
  sharding annotations as annotations (a rank-1 parameter annotated P(None, "model") fails);
- the batch from MINIGPT_BATCH and the generation interval from MINIGPT_EVERY (upstream 144
  and 200), only for a dry run on the CPU.
Twins: `minigpt_hd128.py` has 2 heads of 128 (the same width); `minigpt_bf16.py` computes in
bfloat16 (`dtype=bfloat16` on the model's layers, parameters kept in float32);
each program's `*_tick.py` has its loop clocked: every MINIGPT_TICK steps it waits for the
model's state and prints "tick STEP" (bare_trace.py's mark).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from jax_examples import edit_once, snapshot_file

NOTEBOOK = "docs/source/JAX_for_LLM_pretraining.md"
PREFIX = '''import os

# flax 0.12 shards a variable as it is made: the tutorial's P(None, "model") on rank-1 layer-norm
# parameters then fails; before, it only annotated them (FLIP 4844)
os.environ.setdefault("FLAX_ALWAYS_SHARD_VARIABLE", "false")

import tiktoken as _tiktoken

_GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""


def _stand_in_gpt2():
    """GPT-2's ids without its merges (tiktoken downloads them; the chip has no network): a
    token per byte, but the prompt "Once upon a time" in 4 tokens, as GPT-2 has it."""
    merges = ("On", "Onc", "Once", " u", " up", " upo", " upon", " a", " t", " ti", " tim")
    ranks = {bytes([i]): i for i in range(256)}
    ranks.update({m.encode(): 256 + k for k, m in enumerate((*merges, " time"))})
    ranks.update({f"<{i}>".encode(): i for i in range(256 + len(merges) + 1, 50256)})
    return _tiktoken.Encoding(
        name="gpt2_stand_in",
        pat_str=_GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )


'''
EDITS = [
    ('tokenizer = tiktoken.get_encoding("gpt2")', "tokenizer = _stand_in_gpt2()"),
    ("    batch_size = 144\n", '    batch_size = int(os.environ.get("MINIGPT_BATCH", 144))\n'),
    (  # flax 0.12 wants a module's list of modules marked as data (its error's own advice)
        "        self.transformer_blocks = [TransformerBlock(",
        "        self.transformer_blocks = nnx.List([TransformerBlock(",
    ),
    (
        "        ) for _ in range(num_transformer_blocks)]\n",
        "        ) for _ in range(num_transformer_blocks)])\n",
    ),
    (
        "        if (step + 1) % 200 == 0:\n",
        '        if (step + 1) % int(os.environ.get("MINIGPT_EVERY", 200)) == 0:\n',
    ),
]
BF16 = """import functools as _functools

import jax.numpy as _jnp
from flax import nnx as _nnx

for _layer in ("MultiHeadAttention", "Linear", "Embed", "LayerNorm"):
    setattr(_nnx, _layer, _functools.partial(getattr(_nnx, _layer), dtype=_jnp.bfloat16))


"""
TWINS = {
    "minigpt.py": [],
    "minigpt_hd128.py": [("num_heads = 8\n", "num_heads = 2\n")],
    "minigpt_bf16.py": [],
}
TICK = [
    (
        "        step += 1\n",
        '        if step % int(os.environ.get("MINIGPT_TICK", 10)) == 0:\n'
        "            jax.block_until_ready(nnx.state(model))\n"
        '            print(f"tick {step}", flush=True)\n'
        "        step += 1\n",
    )
]
WORDS = (  # the stand-in stories' words
    "once upon a time there was little girl named lily she loved to play outside with her "
    "big red ball one day saw bird in the tree and wanted fly too mom said you can not but "
    "we go park happy sun sky dog cat boy tom friend jump run fast slow small tall green "
    "blue sad smile found box toy share kind help nice day went home ate cake"
)


def code_cells(markdown: str) -> list[str]:
    """The `{code-cell}` blocks of a MyST notebook, without their option lines."""
    cells, lines, i = [], markdown.splitlines(keepends=True), 0
    while i < len(lines):
        if not lines[i].startswith("```{code-cell}"):
            i += 1
            continue
        i += 1
        if i < len(lines) and lines[i].strip() == "---":  # a YAML block of options
            i += 1
            while lines[i].strip() != "---":
                i += 1
            i += 1
        while i < len(lines) and lines[i].startswith(":"):  # short options (`:id: ...`)
            i += 1
        body = []
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        cells.append("".join(body))
    return cells


def program(markdown: str) -> str:
    """The training program: the cells from the imports to the final generation, shell cells
    (`!`) left out."""
    cells = code_cells(markdown)
    last = [i for i, cell in enumerate(cells) if 'print("Final generated text:")' in cell]
    if len(last) != 1:
        raise SystemExit(f"minigpt: {len(last)} final-generation cells in this snapshot")
    kept = [cell for cell in cells[: last[0] + 1] if not cell.lstrip().startswith("!")]
    return edit_once(PREFIX + "\n\n".join(kept), EDITS, "minigpt")


def write_stories(folder: Path, count: int, seed: int = 0) -> None:
    """TinyStories-train.txt as the tutorial reads it: stories of 60-200 random words, each
    followed by `<|endoftext|>`."""
    rng, words = random.Random(seed), WORDS.split()
    with open(folder / "TinyStories-train.txt", "w") as out:
        for _ in range(count):
            story = " ".join(rng.choice(words) for _ in range(rng.randint(60, 200)))
            out.write(story.capitalize() + ".\n<|endoftext|>\n")


def main(git_dir: str, out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    text = program(snapshot_file(git_dir, NOTEBOOK))
    for name, edits in TWINS.items():
        twin = edit_once(text, edits, name)
        if name == "minigpt_bf16.py":  # after the prefix's flag, before the cells' imports
            twin = twin.replace(
                "import tiktoken as _tiktoken\n", BF16 + "import tiktoken as _tiktoken\n", 1
            )
        (folder / name).write_text(twin)
        (folder / name.replace(".py", "_tick.py")).write_text(edit_once(twin, TICK, name))


if __name__ == "__main__":
    main(*sys.argv[1:3])
