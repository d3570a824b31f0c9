"""Variable-length sequences padded to a few bucket lengths by the DataLoader's collate_fn.

Idiom: the fix tpuscope (and the torch_xla/TPU performance guides) advise for varying sequence
lengths, as users write it: a `collate_fn` that right-pads each batch to the smallest bucket
that fits (here 48 and 64) with `torch.nn.utils.rnn.pad_sequence` + `F.pad`, an attention
`src_key_padding_mask`, a small `nn.TransformerEncoder` language model, SGD,
`torch_xla.sync()` per step. Lengths as a length-sorted loader gives them (as in tpuscope's
examples/variable_length.py). In the corpus because it is the advice followed: the truth is
one compile per bucket, each once (iterations 0 and 1), then every step from the cache.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

BUCKETS, VOCAB, D_MODEL, BATCH = (48, 64), 128, 32, 4
LENGTHS = [41, 53, 37, 64, 45, 58, 41, 53, 37, 64, 45, 58]


def collate_to_bucket(sequences: list[torch.Tensor]) -> torch.Tensor:
    """Pad the batch to the smallest bucket that fits its longest sequence (0 is the pad id)."""
    batch = pad_sequence(sequences, batch_first=True, padding_value=0)
    target = next(b for b in BUCKETS if b >= batch.shape[1] - 1) + 1
    return F.pad(batch, (0, target - batch.shape[1]), value=0)


def make_data() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, VOCAB, (int(torch.randint(length // 2, length + 1, (1,), generator=g)) + 1,),
                          generator=g) if i else torch.randint(1, VOCAB, (length + 1,), generator=g)
            for length in LENGTHS for i in range(BATCH)]


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, 2, 64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens), src_key_padding_mask=tokens.eq(0)))


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyLM().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    loader = DataLoader(make_data(), batch_size=BATCH, collate_fn=collate_to_bucket)
    for step, batch in enumerate(loader):
        hook.mark(f"train:i{step}")
        batch = batch.to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        optimizer.zero_grad()
        loss = loss_fn(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # corpus: sync
    print(f"trained {len(loader)} steps padded to buckets {BUCKETS}")
    hook.finish(iterations=len(loader))


if __name__ == "__main__":
    main()
