"""Boolean-mask indexing and `.item()` inside the training step: CPU fallbacks and host syncs.

`logits[mask]` needs `aten::nonzero`, whose output size depends on the data, so
torch_xla cuts the graph, copies the mask to the host and runs it on the CPU (a
fallback); `loss.item()` in the loop reads a value back from the device on every
step (`aten::_local_scalar_dense`). `--fixed` shows the fix: a masked mean with
`torch.where` stays on the device, and the loss is read every `--log-every` steps.
"""

import argparse

import torch
import torch.nn as nn
import torch_xla


def masked_loss(logits: torch.Tensor, labels: torch.Tensor, fixed: bool) -> torch.Tensor:
    """Cross-entropy over the labelled examples only (label -1 = unlabelled)."""
    mask = labels >= 0
    if fixed:  # static shapes: weight every example, zero for the unlabelled ones
        per_example = nn.functional.cross_entropy(logits, labels.clamp(min=0), reduction="none")
        return torch.where(mask, per_example, 0.0).sum() / mask.sum().clamp(min=1)
    return nn.functional.cross_entropy(logits[mask], labels[mask])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--fixed", action="store_true", help="no fallback, no per-step host sync")
    parser.add_argument("--log-every", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(args.features, 64), nn.ReLU(), nn.Linear(64, args.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for step in range(args.steps):
        x = torch.randn(args.batch, args.features).to(device)
        labels = torch.randint(-1, args.classes, (args.batch,)).to(device)
        opt.zero_grad()
        loss = masked_loss(model(x), labels, args.fixed)
        loss.backward()
        opt.step()
        if not args.fixed:
            total += loss.item()
        torch_xla.sync()
        if args.fixed and step % args.log_every == 0:
            total += loss.item()
    print(f"trained {args.steps} steps, summed logged loss {total:.3f}")


if __name__ == "__main__":
    main()
