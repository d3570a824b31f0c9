"""A Hugging Face `Trainer` fine-tuning a tiny random-init Llama on torch_xla: the framework owns the loop.

Idiom: the transformers examples' `Trainer(model=..., args=TrainingArguments(...),
train_dataset=..., data_collator=...)` then `trainer.train()`, as users run it on TPU
(transformers drives torch_xla itself: accelerate wraps the DataLoader in an `MpDeviceLoader`
whose `next()` marks a step, the trainer calls `xm.mark_step()` before each logging pass and
reads the logged loss and grad norm with `.item()`). `LlamaForCausalLM(LlamaConfig(tiny))`, no
hub download, a synthetic dataset of fixed-length token rows, `max_steps=12`, logging every 4
steps, `optim="adamw_torch"` (the default fused AdamW refuses XLA tensors), no checkpoint, no
report_to. In the corpus because the user's loop is the trainer's:
12 optimizer steps must be 12 steps, whatever boundaries the trainer and loader pass.
The truth's marks come from a `TrainerCallback` (on_step_begin / on_train_end): user code the
trainer calls, which only reads counters.
"""

from __future__ import annotations

import tempfile

import hook
import torch
from torch.utils.data import Dataset
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

BATCH, SEQ, MAX_STEPS, LOG_STEPS, ROWS = 4, 32, 12, 4, 64


class Tokens(Dataset):
    """Fixed-length synthetic token rows; labels = input_ids (causal LM)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.rows = torch.randint(0, 512, (ROWS, SEQ), generator=generator)

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


class Marks(TrainerCallback):
    """The truth's per-iteration marks (no-ops unless CORPUS_TRUTH is set)."""

    def on_step_begin(self, args, state, control, **kwargs) -> None:  # type: ignore[no-untyped-def]
        hook.mark(f"train:i{state.global_step}")

    def on_train_end(self, args, state, control, **kwargs) -> None:  # type: ignore[no-untyped-def]
        hook.mark("after-train")


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=MAX_STEPS, per_device_train_batch_size=BATCH,
                                 learning_rate=1e-4, optim="adamw_torch", logging_steps=LOG_STEPS,
                                 save_strategy="no", report_to=[], disable_tqdm=True, dataloader_drop_last=True)
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(), data_collator=default_data_collator,
                          callbacks=[Marks()])
        result = trainer.train()  # corpus: train
    print(f"global_step {result.global_step} train_loss {result.training_loss:.4f}")
    hook.finish(iterations=MAX_STEPS)


if __name__ == "__main__":
    main()
