"""Make two of patrick-kidger/equinox's example notebooks runnable on the chip as programs, and
the twins their truth needs, as chip_equinox.sh runs them (the snapshot is fetched, never
committed):

    python3 eqx_examples.py SNAPSHOT_GIT_DIR OUT

Each notebook's code cells, joined in order, are the program; the edits, each found exactly
once, are only what the chip needs:
- `train_rnn.py` (docs/examples/train_rnn.ipynb: a GRU over `lax.scan`, batches of 32 from a
  numpy loader, `eqx.filter_jit` step, `loss.item()` and a print each step): unchanged but for
  its step count, read from EQX_RNN_STEPS (upstream 200).
- `vit.py` (docs/examples/vision_transformer.ipynb: a ViT of 6 blocks, width 512, 8 heads of
  64, 65 tokens, batch 64, f32, `eqx.filter_jit` step): torchvision's CIFAR-10 and torch's
  DataLoader (the chip has no torch and no network) become a numpy stand-in of their shapes,
  the same augmentation done in numpy; its step count and print interval read from
  EQX_VIT_STEPS and EQX_VIT_PRINT (upstream 100000 and 1000); the test loop's batches from
  EQX_VIT_TEST_BATCHES (upstream all 156).
- `score_based_diffusion.py` (docs/examples/score_based_diffusion.ipynb, session 42: an MLP-Mixer
  score model, patches of 4 into hidden 64, mixers of 512, f32, batch 256 drawn by indexing a
  device array, an `eqx.filter_jit` step, `value.item()` each step; then 100 samples solved by
  diffrax): unchanged but for its step count and print interval, read from SBD_STEPS and
  SBD_PRINT (upstream 1,000,000 and 10,000). MNIST (no network on the chip) is
  `write_mnist(DIR)`'s stand-in, the file upstream downloads, random digits in its format.
- Twins, the truth of what a card could say: `vit_keys.py` splits the step's 64 dropout keys
  in one call (upstream splits 65 keys, unpacks them into a Python list and stacks them back
  with `jnp.array`, each step, outside the jitted step); `vit_hd128.py` has 4 heads of 128;
  `train_rnn_noitem.py` drops the per-step `.item()` and prints its step number every 50 steps; `*_nowait.py` run the step
  under plain `jax.jit` over its arrays (`eqx.filter_jit` waits for each call's result, to
  raise `eqx.error_if`'s errors: Equinox 0.13.8's `_jit.py`, `marker.block_until_ready()`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from jax_examples import edit_once, snapshot_file

LOADER = '''
class _Batch(np.ndarray):
    """A numpy batch answering `.numpy()` as the torch tensor it stands in for does."""

    def numpy(self):
        return np.asarray(self)


class _Cifar:
    """Stand-in for torchvision's CIFAR-10 (no network on the chip): its shape, uint8 images."""

    def __init__(self, size, seed):
        rng = np.random.RandomState(seed)
        self.images = rng.randint(0, 256, (size, 32, 32, 3)).astype(np.uint8)
        self.labels = rng.randint(0, 10, size)

    def __len__(self):
        return len(self.labels)


_MEAN = np.array((0.4914, 0.4822, 0.4465), np.float32)[:, None, None]
_STD = np.array((0.2023, 0.1994, 0.2010), np.float32)[:, None, None]


class _Loader:
    """torch's DataLoader(shuffle=True, drop_last=True) over the transforms above, in numpy."""

    def __init__(self, dataset, batch_size, train):
        self.dataset, self.batch_size, self.train = dataset, batch_size, train
        self.rng = np.random.RandomState(1)

    def __iter__(self):
        order = self.rng.permutation(len(self.dataset))
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):
            index = order[start : start + self.batch_size]
            images = self.dataset.images[index].transpose(0, 3, 1, 2).astype(np.float32) / 255
            if self.train:  # RandomCrop(32, padding=4) and RandomHorizontalFlip
                padded = np.pad(images, ((0, 0), (0, 0), (4, 4), (4, 4)))
                dy, dx = self.rng.randint(0, 9, 2)
                images = padded[:, :, dy : dy + 32, dx : dx + 32]
                if self.rng.rand() < 0.5:
                    images = images[:, :, :, ::-1]
            images = ((images - _MEAN) / _STD).astype(np.float32)
            yield images.view(_Batch), self.dataset.labels[index].view(_Batch)


train_dataset = _Cifar(int(os.environ.get("EQX_VIT_TRAIN", 50000)), 0)
test_dataset = _Cifar(10000, 1)
trainloader = _Loader(train_dataset, batch_size, True)
testloader = _Loader(test_dataset, batch_size, False)
'''
NO_WAIT = """import equinox as _eqx
import jax as _jax


def _no_wait(step):
    \"\"\"`step`, an `eqx.filter_jit` function, under plain `jax.jit`: its arrays traced, the rest
    fixed at the first call (the same at every call here), and no wait for the device.\"\"\"
    fixed = {}

    def run(dynamic, static):
        out = step.__wrapped__(*_eqx.combine(dynamic, static))
        out_dynamic, fixed["out_static"] = _eqx.partition(out, _eqx.is_array)
        return out_dynamic

    def call(*args):
        dynamic, static = _eqx.partition(args, _eqx.is_array)
        if "jitted" not in fixed:
            fixed["jitted"] = _jax.jit(lambda dynamic: run(dynamic, static))
        return _eqx.combine(fixed["jitted"](dynamic), fixed["out_static"])

    return call


"""
RNN = [("    steps=200,\n", '    steps=int(__import__("os").environ.get("EQX_RNN_STEPS", 200)),\n')]
RNN_TWIN = [  # its step number printed every 50 steps, for bare_trace.py's clock
    (
        '        loss = loss.item()\n        print(f"step={step}, loss={loss}")\n',
        '        if step % 50 == 0:\n            print(f"step={step}")\n',
    )
]
RNN_NO_WAIT = [
    (
        "        return loss, model, opt_state\n",
        "        return loss, model, opt_state\n\n    make_step = _no_wait(make_step)\n",
    )
]
RNN_NUMPY = [  # the loader indexes numpy copies, not the device arrays get_data returns
    (
        "    iter_data = dataloader((xs, ys), batch_size)\n",
        "    iter_data = dataloader((np.asarray(xs), np.asarray(ys)), batch_size)\n",
    )
]
VIT = [
    ("\n# We'll use PyTorch to load the dataset.\nimport torch\nimport torchvision\n", "\n"),
    ("import torchvision.transforms as transforms\n", "import os\n"),
    ("num_steps = 100000\n", 'num_steps = int(os.environ.get("EQX_VIT_STEPS", 100000))\n'),
    ("data_loader: torch.utils.data.DataLoader,", "data_loader,"),
    ("print_every: int = 1000,", 'print_every: int = int(os.environ.get("EQX_VIT_PRINT", 1000)),'),
    (
        "for batch in range(len(test_dataset) // batch_size):",
        'for batch in range(int(os.environ.get("EQX_VIT_TEST_BATCHES", len(test_dataset) // batch_size))):',
    ),
]
VIT_TWINS = {
    "vit_keys.py": [
        (
            "key, *subkeys = jr.split(key, num=batch_size + 1)\n        subkeys = jnp.array(subkeys)",
            "key, subkey = jr.split(key)\n        subkeys = jr.split(subkey, batch_size)",
        )
    ],
    "vit_hd128.py": [("num_heads = 8\n", "num_heads = 4\n")],
    "vit_nowait.py": [
        (
            "    return model, new_state, loss\n",
            "    return model, new_state, loss\n\n\nstep_model = _no_wait(step_model)\n",
        )
    ],
}


def notebook_code(git_dir: str, name: str) -> list[str]:
    """The code cells of docs/examples/NAME.ipynb in the snapshot, in order."""
    cells = json.loads(snapshot_file(git_dir, f"docs/examples/{name}.ipynb"))["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def vit_program(cells: list[str]) -> str:
    """The ViT notebook with its torch data cell (the one building the DataLoaders) replaced
    by the numpy stand-in."""
    data = [i for i, cell in enumerate(cells) if "torch.utils.data.DataLoader(" in cell]
    if len(data) != 1:
        raise SystemExit(f"vision_transformer: {len(data)} DataLoader cells in this snapshot")
    cells = [*cells[: data[0]], LOADER, *cells[data[0] + 1 :]]
    return edit_once("\n\n".join(cells) + "\n", VIT, "vision_transformer")


SBD = [
    ("    num_steps=1_000_000,\n", '    num_steps=int(os.environ.get("SBD_STEPS", 1_000_000)),\n'),
    ("    print_every=10_000,\n", '    print_every=int(os.environ.get("SBD_PRINT", 10_000)),\n'),
]
SBD_NUMPY = [  # the loader indexes a numpy copy of the data with a numpy permutation
    ("import array\n", "import array\n\nimport numpy as np\n"),
    (
        "        perm = jr.permutation(subkey, indices)\n",
        "        perm = np.asarray(jr.permutation(subkey, indices))\n",
    ),
    (
        "range(num_steps), dataloader(data, batch_size, key=loader_key)",
        "range(num_steps), dataloader(np.asarray(data), batch_size, key=loader_key)",
    ),
]


def write_mnist(folder: Path) -> None:
    """The file score_based_diffusion's `mnist()` downloads, in its format (idx3, gzipped):
    60,000 random 28x28 uint8 images, under FOLDER/data/mnist where the program looks."""
    import gzip
    import struct

    import numpy as np

    target = folder / "data" / "mnist"
    target.mkdir(parents=True, exist_ok=True)
    images = np.random.RandomState(0).randint(0, 256, (60000, 28, 28)).astype(np.uint8)
    with gzip.open(target / "train-images-idx3-ubyte.gz", "wb", compresslevel=1) as out:
        out.write(struct.pack(">IIII", 2051, 60000, 28, 28) + images.tobytes())


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rnn = edit_once("\n\n".join(notebook_code(git_dir, "train_rnn")) + "\n", RNN, "train_rnn")
    (out / "train_rnn.py").write_text(rnn)
    noitem = edit_once(rnn, RNN_TWIN, "train_rnn")
    (out / "train_rnn_noitem.py").write_text(noitem)
    (out / "train_rnn_nowait.py").write_text(NO_WAIT + edit_once(noitem, RNN_NO_WAIT, "train_rnn"))
    (out / "train_rnn_numpy.py").write_text(edit_once(rnn, RNN_NUMPY, "train_rnn"))
    sbd = "\n\n".join(notebook_code(git_dir, "score_based_diffusion")) + "\n"
    sbd = edit_once(sbd, SBD, "score_based_diffusion")
    (out / "score_based_diffusion.py").write_text(sbd)
    (out / "score_based_diffusion_numpy.py").write_text(edit_once(sbd, SBD_NUMPY, "sbd_numpy"))
    write_mnist(out)
    vit = vit_program(notebook_code(git_dir, "vision_transformer"))
    (out / "vit.py").write_text(vit)
    for name, edits in VIT_TWINS.items():
        twin = edit_once(vit, edits, name)
        if name == "vit_nowait.py":
            keys = edit_once(twin, VIT_TWINS["vit_keys.py"], name)
            (out / "vit_keys_nowait.py").write_text(NO_WAIT + keys)
        (out / name).write_text(NO_WAIT + twin if name.endswith("_nowait.py") else twin)


if __name__ == "__main__":
    main()
