"""Make two of google-deepmind/optax's example notebooks runnable on the chip as programs, and
the twins their truth needs, as chip_optax.sh runs them (the snapshot is fetched, never
committed):

    python3 optax_examples.py SNAPSHOT_GIT_DIR OUT

Each notebook's code cells, joined in order (IPython's `%%time` line dropped), are the program,
run with `OUT/stubs` on PYTHONPATH: stand-ins for what the chip lacks (no network, no
tensorflow, no OpenCV), so that upstream's own code runs unchanged:
- `tensorflow_datasets`: `load` gives synthetic tiny_shakespeare (its split lengths, a
  65-character vocabulary) and CIFAR-10/100 (uint8 32x32x3 images, labels, `info`), of the
  sizes OPTAX_CIFAR_TRAIN / OPTAX_CIFAR_TEST (upstream 50000 / 10000);
- `albumentations`: the five transforms the ResNet notebook composes, per image in numpy (the
  real library does them per image in OpenCV, on the host, as here);
- `matplotlib`: drawing does nothing (the code computing what is drawn still runs).

- `nanolm.py` (examples/nanolm.ipynb: a char-level decoder, 6 layers, width 256, 8 heads over
  32 qkv features, dropout 0.2, f32, batch 128 x 64, its batch sampled inside the jitted AdamW
  step): steps and eval interval from NANOLM_STEPS / NANOLM_EVAL (upstream 50000 / 2000).
- `cifar_resnet.py` (examples/cifar10_resnet.ipynb: an NNX ResNet-18, f32, batch 128, SGD
  momentum, `nnx.jit` step, batches augmented per image in Python): epochs from
  OPTAX_EPOCHS (upstream 50) and a print every OPTAX_PRINT epochs (upstream 10); its blocks'
  `self.proj = None` made `nnx.data(None)` and its `self.blocks = []` an `nnx.List()`, as flax
  0.12's errors ask (upstream's notebook does not run on flax 0.12.8 without them).
- Twins, the truth of what a card could say: `nanolm_bf16.py` (bf16 compute over f32
  parameters in the loss), `nanolm_rbg.py` (JAX's `rbg` PRNG, as TPU training code sets for
  dropout), `nanolm_nodrop.py` (dropout 0: all the random bits' cost); `cifar_resnet_bf16.py`
  (its layers' `dtype` bf16, their parameters f32), `cifar_resnet_cached.py` (each loader's batches made on
  its first pass and replayed: the per-image augmentation's cost).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jax_examples import edit_once, snapshot_file

TFDS = '''"""Synthetic stand-in for tensorflow_datasets (no network and no tensorflow on the chip)."""
import os

import numpy as np

_VOCAB = "\\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class _Split:
    def __init__(self, examples):
        self.examples = examples

    def concatenate(self, other):
        return _Split(self.examples + other.examples)

    def as_numpy_iterator(self):
        return iter(self.examples)

    def __iter__(self):
        return iter(self.examples)


def _text(length, seed):
    rng = np.random.RandomState(seed)
    return "".join(np.array(list(_VOCAB))[rng.randint(0, len(_VOCAB), length)]).encode()


def _images(size, seed):
    rng = np.random.RandomState(seed)
    images = rng.randint(0, 256, (size, 32, 32, 3)).astype(np.uint8)
    labels = rng.randint(0, 10, size).astype(np.int64)
    return _Split(list(zip(images, labels)))


class _Info:
    def __init__(self, train):
        label = type("Label", (), {"num_classes": 10, "names": [str(i) for i in range(10)]})
        self.features = {"label": label(), "image": type("Image", (), {"shape": (32, 32, 3)})()}
        self.splits = {"train": type("Split", (), {"num_examples": train})()}


def load(name, split=None, as_supervised=False, with_info=False):
    if name == "tiny_shakespeare":  # its splits' lengths: 1,003,854 characters in all
        return {
            "train": _Split([{"text": _text(1003854 - 2 * 55770, 0)}]),
            "test": _Split([{"text": _text(55770, 1)}]),
            "validation": _Split([{"text": _text(55770, 2)}]),
        }
    train = int(os.environ.get("OPTAX_CIFAR_TRAIN", 50000))
    splits = (_images(train, 0), _images(int(os.environ.get("OPTAX_CIFAR_TEST", 10000)), 1))
    return (list(splits), _Info(train)) if with_info else list(splits)


def as_numpy(split):
    return split
'''
ALBUMENTATIONS = '''"""Stand-in for albumentations (no OpenCV on the chip): the transforms the ResNet notebook
composes, each applied per image in numpy as albumentations applies them per image."""
import numpy as np


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return {"image": image}


class PadIfNeeded:
    def __init__(self, min_height, min_width, p=1.0):
        self.height, self.width = min_height, min_width

    def __call__(self, image):  # albumentations' default border: reflect_101
        dy, dx = max(0, self.height - image.shape[0]), max(0, self.width - image.shape[1])
        pad = ((dy // 2, dy - dy // 2), (dx // 2, dx - dx // 2), (0, 0))
        return np.pad(image, pad, mode="reflect")


class RandomCrop:
    def __init__(self, width, height, p=1.0):
        self.height, self.width = height, width

    def __call__(self, image):
        y = np.random.randint(0, image.shape[0] - self.height + 1)
        x = np.random.randint(0, image.shape[1] - self.width + 1)
        return image[y : y + self.height, x : x + self.width]


class HorizontalFlip:
    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, image):
        return image[:, ::-1] if np.random.rand() < self.p else image


class Normalize:
    def __init__(self, mean, std, max_pixel_value=255.0):
        self.mean = np.array(mean, np.float32) * max_pixel_value
        self.std = np.array(std, np.float32) * max_pixel_value

    def __call__(self, image):
        return (image.astype(np.float32) - self.mean) / self.std
'''
PYPLOT = '''"""Stand-in for matplotlib.pyplot: every call draws nothing."""


class _Nothing:
    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        return self

    def __getitem__(self, key):
        return self

    def __iter__(self):
        return iter((self, self))


def __getattr__(name):
    return _Nothing()
'''
STUBS = {
    "tensorflow_datasets/__init__.py": TFDS,
    "albumentations/__init__.py": ALBUMENTATIONS,
    "matplotlib/__init__.py": "",
    "matplotlib/pyplot.py": PYPLOT,
}
NANOLM = [
    (
        'N_ITERATIONS = 50_000  # @param{type:"integer"}',
        'N_ITERATIONS = int(__import__("os").environ.get("NANOLM_STEPS", 50_000))',
    ),
    (
        'N_FREQ_EVAL = 2_000 # @param{type:"integer"}',
        'N_FREQ_EVAL = int(__import__("os").environ.get("NANOLM_EVAL", 2_000))',
    ),
]
CAST = "jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)"
NANOLM_TWINS = {
    "nanolm_bf16.py": [
        (
            'logits = model.apply(params, x, training=True, rngs={"dropout": dropout_key})',
            f'logits = model.apply({CAST}, x, training=True, rngs={{"dropout": dropout_key}})',
        )
    ],
    "nanolm_rbg.py": [
        ("import optax\n", 'import optax\n\njax.config.update("jax_default_prng_impl", "rbg")\n')
    ],
    "nanolm_nodrop.py": [("DROPOUT_RATE = 0.2", "DROPOUT_RATE = 0.0")],
}
RESNET = [  # flax 0.12 (the chip's): modules in attributes it can see are data
    (
        "    self.proj = None\n    if stride != 1 or in_features != filters:\n",
        "    self.proj = nnx.data(None)\n    if stride != 1 or in_features != filters:\n",
    ),
    (
        "    self.proj = None\n    if stride != 1 or in_features != filters * 4:\n",
        "    self.proj = nnx.data(None)\n    if stride != 1 or in_features != filters * 4:\n",
    ),
    ("    self.blocks = []\n", "    self.blocks = nnx.List()\n"),
    (
        'MAX_EPOCHS = 50  # @param{type:"integer"}',
        'MAX_EPOCHS = int(__import__("os").environ.get("OPTAX_EPOCHS", 50))',
    ),
    (
        "    if epoch % 10 == 0:",
        '    if epoch % int(__import__("os").environ.get("OPTAX_PRINT", 10)) == 0:',
    ),
]
RESNET_TWINS = {
    "cifar_resnet_bf16.py": [
        (
            "import jax.numpy as jnp\n",
            "import jax.numpy as jnp\n\nfor _layer in ('Conv', 'BatchNorm', 'Linear'):  # bf16 compute\n"
            "    setattr(nnx, _layer, partial(getattr(nnx, _layer), dtype=jnp.bfloat16))\n",
        )
    ],
    "cifar_resnet_cached.py": [
        (
            "    return generator\n",
            "    made = []\n\n    def cached():\n        if not made:\n"
            "            made.extend(generator())\n        return iter(made)\n\n    return cached\n",
        )
    ],
}


def notebook_program(git_dir: str, path: str) -> str:
    """The notebook's code cells joined in order, IPython's cell magics left out."""
    cells = json.loads(snapshot_file(git_dir, path))["cells"]
    code = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    lines = "\n\n".join(code).splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("%%")) + "\n"


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    nanolm = edit_once(notebook_program(git_dir, "examples/nanolm.ipynb"), NANOLM, "nanolm")
    resnet = edit_once(notebook_program(git_dir, "examples/cifar10_resnet.ipynb"), RESNET, "resnet")
    for name, program, twins in (
        ("nanolm.py", nanolm, NANOLM_TWINS),
        ("cifar_resnet.py", resnet, RESNET_TWINS),
    ):
        (out / name).write_text(program)
        for twin, edits in twins.items():
            (out / twin).write_text(edit_once(program, edits, twin))
    for path, text in STUBS.items():
        (out / "stubs" / path).parent.mkdir(parents=True, exist_ok=True)
        (out / "stubs" / path).write_text(text)


if __name__ == "__main__":
    main()
