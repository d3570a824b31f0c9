"""Variable-length batches: every new sequence length compiles a new XLA graph (shape churn).

Each step's batch is as long as its longest sequence, so the sequence dim of the
token tensor changes from step to step and XLA compiles one graph per length.
`tpuscope run python examples/variable_length.py` reports the churning dim, the
lengths seen and a bucketing plan; `--buckets 48,64` pads each batch up to the next
bucket, which is that fix (two graphs instead of one per length).
"""

import argparse

import torch
import torch.nn as nn
import torch_xla
from train_transformer import TinyLM

# Lengths of the longest sequence per batch, as a length-sorted loader would give.
LENGTHS = [41, 53, 37, 64, 45, 58, 41, 53, 37, 64, 45, 58]


def pad_to_bucket(batch: torch.Tensor, buckets: list[int], pad_id: int = 0) -> torch.Tensor:
    """Right-pad the sequence dim up to the smallest bucket that fits."""
    length = batch.shape[1] - 1
    target = next((b for b in sorted(buckets) if b >= length), length)
    return nn.functional.pad(batch, (0, target - length), value=pad_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=len(LENGTHS))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--buckets", default="", help="comma list of lengths to pad to, e.g. 48,64")
    args = parser.parse_args()
    buckets = [int(b) for b in args.buckets.split(",") if b]

    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyLM(args.vocab, args.d_model, heads=2, layers=1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)

    for step in range(args.steps):
        length = LENGTHS[step % len(LENGTHS)]
        batch = torch.randint(1, args.vocab, (args.batch, length + 1))
        if buckets:
            batch = pad_to_bucket(batch, buckets)
        batch = batch.to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        opt.zero_grad()
        logits = model(inputs)
        loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"trained {args.steps} steps on lengths {sorted(set(LENGTHS[: args.steps]))}")


if __name__ == "__main__":
    main()
