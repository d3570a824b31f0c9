"""Make google/flax's `examples/imagenet` (ResNet-50 trained with SGD under `jax.pmap`, its
state unreplicated through `in_axes=None`, batches prefetched to the device, clu's logging of
steps per second every 100 steps and its own profile from step 10) runnable on the chip, as
chip_flax.sh part 4 runs it (the snapshot is fetched, never committed):

    python3 flax_imagenet.py SNAPSHOT_GIT_DIR OUT

- `OUT/imagenet/`: upstream's `main.py`, `train.py`, `models.py` and `configs/default.py`
  unchanged but one line: clu's writer logs only (as in flax_lm1b.py). Its default config is
  f32, batch 128; `--config.half_precision=True` is its bf16 twin.
- `OUT/imagenet/input_pipeline.py`: a stand-in for upstream's tf.data pipeline (ImageNet cannot
  be fetched on the chip): 8 batches of random images of its shape and dtype, made ahead and
  cycled, as its fake-data benchmark feeds mock data; each array answers `_numpy()`.
- `OUT/imagenet/main_placed.py` + `train_placed.py` (session 35): the program with the fix of
  tpuscope's recompile card applied: the state placed once, before the loop, with the
  sharding the pmapped step returns it in (`NamedSharding` over a one-device mesh, `P()`).
- `OUT/stubs/tensorflow_datasets`: `builder(name).info.splits[...]` with ImageNet's split sizes.
  The TensorFlow stand-in is flax_lm1b.py's (make both into one OUT), with its dtypes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flax_lm1b import MAIN_TIMED, TENSOR_CLASS, TENSORBOARD, TENSORFLOW, copy_example, write_stubs
from jax_examples import edit_once

FILES = ["main.py", "models.py", "configs/default.py"]
WRITER = "just_logging=jax.process_index() != 0"  # upstream's spelling in imagenet's train.py
STEP_OFFSET = "  step_offset = int(state.step)\n"
PLACED = [
    (
        STEP_OFFSET,
        STEP_OFFSET + "  state = jax.device_put(state, jax.sharding.NamedSharding(\n"
        "      jax.sharding.Mesh(jax.local_devices(), ('batch',)), jax.sharding.PartitionSpec()))\n",
    )
]
MAIN_PLACED = [(old, new.replace("train_timed", "train_placed")) for old, new in MAIN_TIMED]

PIPELINE = f'''"""Stand-in for imagenet's tf.data pipeline: random images of its shapes and dtypes."""
import itertools

import numpy as np

{TENSOR_CLASS}

def create_split(dataset_builder, batch_size, train, dtype=np.float32, image_size=224,
                 cache=False, shuffle_buffer_size=2_000, prefetch=10):
    rng = np.random.default_rng(0 if train else 1)
    batches = []
    for _ in range(8):
        image = rng.standard_normal((batch_size, image_size, image_size, 3), np.float32)
        label = rng.integers(0, 1000, batch_size).astype(np.int32)
        batches.append({{"image": image.astype(dtype).view(Tensor), "label": label.view(Tensor)}})
    return itertools.cycle(batches)
'''

DATASETS = {
    "tensorflow_datasets/__init__.py": (
        '"""Stand-in for tfds: ImageNet\'s split sizes, which the example reads."""\n'
        "import types\n\n"
        "SPLITS = {'train': 1281167, 'validation': 50000}\n\n\n"
        "def builder(name, **kwargs):\n"
        "    splits = {k: types.SimpleNamespace(num_examples=n) for k, n in SPLITS.items()}\n"
        "    return types.SimpleNamespace(info=types.SimpleNamespace(splits=splits))\n"
    ),
}


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    imagenet, train = copy_example(git_dir, out, "imagenet", FILES, WRITER)
    (imagenet / "train_placed.py").write_text(edit_once(train, PLACED, "train.py"))
    main_py = (imagenet / "main.py").read_text()
    (imagenet / "main_placed.py").write_text(edit_once(main_py, MAIN_PLACED, "main.py"))
    (imagenet / "input_pipeline.py").write_text(PIPELINE)
    write_stubs(out, {**TENSORFLOW, **TENSORBOARD, **DATASETS})


if __name__ == "__main__":
    main()
