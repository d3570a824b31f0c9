"""The Keras corpus drivers' per-batch callback: the truth's iteration marks (hook.py)."""

from __future__ import annotations

import hook
import keras


class MarkBatches(keras.callbacks.Callback):
    """Marks each train batch as an iteration (hook.mark is a no-op without CORPUS_TRUTH)."""

    def __init__(self) -> None:
        super().__init__()
        self.iterations = 0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        hook.mark(f"train:i{self.iterations}")
        self.iterations += 1

    def on_train_end(self, logs: dict | None = None) -> None:
        hook.mark("after-fit")
