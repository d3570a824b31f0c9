"""The epoch timer the Keras drivers share: Keras reads its logs at each epoch's end, so an
epoch's wall time holds its steps' device work; the first epoch (its compiles) is left out."""

import time

import keras


class EpochTimer(keras.callbacks.Callback):
    """Appends the wall time of each epoch after the first to `times`."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if epoch > 0:
            self.times.append(time.perf_counter() - self.start)
