"""A decode loop that feeds the whole, growing sequence back every step: a recompile storm.

Each generated token makes the input one position longer, so every step traces a
graph with a new shape and XLA compiles it again; compile time dwarfs the step.
The usual fix is a fixed-size buffer (or a static KV cache) written at a position
index, so every step has the same shapes.
"""

import argparse

import torch
import torch_xla
from train_transformer import TinyLM


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyLM(args.vocab, args.d_model, heads=2, layers=1).to(device).eval()
    tokens = torch.randint(0, args.vocab, (2, args.prompt)).to(device)
    for _ in range(args.steps):
        logits = model(tokens)
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token], dim=1)  # one longer every step
        torch_xla.sync()
    print(f"generated {args.steps} tokens, sequence length now {tokens.shape[1]}")


if __name__ == "__main__":
    main()
