"""Make google/flax's `examples/lm1b` (a Transformer language model: 6 layers, width 512, 8
heads of 64, packed sequences of 128 tokens, bf16, `jax.jit` over a mesh with Flax's logical
axis rules, clu's periodic actions and its own profiler from step 10) runnable on the chip, as
chip_flax.sh part 3 runs it (the snapshot is fetched, never committed):

    python3 flax_lm1b.py SNAPSHOT_GIT_DIR OUT

- `OUT/lm1b/`: upstream's `main.py`, `train.py`, `models.py`, `temperature_sampler.py`,
  `utils.py` and `configs/default.py` unchanged but one line: clu's writer logs only
  (`just_logging=True`: TensorBoard's writer needs TensorFlow, which the chip lacks; the
  logging writer reads the same scalars to the host).
- `OUT/lm1b/input_pipeline.py`: a stand-in for upstream's tf.data pipeline (LM1B and its
  SentencePiece model cannot be fetched on the chip), with its output's shapes and dtypes:
  training batches packed to `max_target_length` (segments of 8-60 tokens, their positions and
  segment ids, zeros after the last one), made ahead as tf.data's prefetch makes them, and
  evaluation batches padded to `max_eval_target_length`, each array answering `_numpy()` as a
  TensorFlow tensor does. Its tokenizer maps bytes to ids.
- `OUT/lm1b/main_timed.py` + `train_timed.py`: the same program printing the mean wall time
  of training steps LM1B_T0..LM1B_T1 (the device waited for at both ends), after clu's profile
  of steps 10.. has ended.
- `OUT/stubs/tensorflow`, `OUT/stubs/tensorboard`: what `train.py`, `main.py` and clu import
  of them: gfile's makedirs, the GPU hiding call, the names clu's TensorBoard writer reads at
  import. clu and ml_collections themselves are real (their wheels travel in .tpu/whl).
"""

from __future__ import annotations

import sys
from pathlib import Path

from flax_examples import show
from jax_examples import edit_once  # beside this file: its folder is on the path

FILES = ["main.py", "models.py", "temperature_sampler.py", "utils.py", "configs/default.py"]
WRITER = "just_logging=jax.process_index() > 0"  # upstream's spelling in lm1b's train.py
TIMED = [
    (
        "        train_metrics.append(metrics)\n",
        "        train_metrics.append(metrics)\n"
        "      if step in (_T0, _T1):\n"
        "        jax.block_until_ready(state)\n"
        "        _marks.append(time.perf_counter())\n"
        "        if step == _T1:\n"
        "          ms = 1e3 * (_marks[1] - _marks[0]) / (_T1 - _T0)\n"
        '          print(f"lm1b steps {_T0}..{_T1}: {ms:.4f} ms a step", flush=True)\n',
    ),
    (
        "import os\n",
        "import os\nimport time\n"
        '_T0 = int(os.environ.get("LM1B_T0", 500))\n'
        '_T1 = int(os.environ.get("LM1B_T1", 790))\n'
        "_marks = []\n",
    ),
]
MAIN_TIMED = [("import train\n", "import train_timed as train\n")]

TENSOR_CLASS = '''
class Tensor(np.ndarray):
    """A numpy array answering TensorFlow's `numpy()` and `_numpy()`."""

    def numpy(self):
        return self.view(np.ndarray)

    _numpy = numpy
'''

PIPELINE = f'''"""Stand-in for lm1b's tf.data pipeline: synthetic token batches of its shapes and dtypes."""
import itertools

import numpy as np

EOS_ID = 2

{TENSOR_CLASS}

def _tensor(values, dtype=np.int32):
    return np.asarray(values, dtype).view(Tensor)


class Encoder:
    """Bytes to ids 3.. (0 pads, 2 ends), as the SentencePiece model's API reads them."""

    def __init__(self, size):
        self.size = size

    def vocab_size(self):
        return self.size

    def tokenize(self, text):
        return _tensor([3 + b % (self.size - 3) for b in text.encode()] + [EOS_ID])

    def detokenize(self, ids):
        return _Text(bytes(32 + int(i) % 95 for i in ids))


class _Text:
    """A scalar string tensor: `numpy()` gives its bytes."""

    def __init__(self, data):
        self.data = data

    def numpy(self):
        return self.data


def _packed(rng, batch, length, vocab):
    """One packed batch: segments of 8-60 tokens laid end to end, zeros after the last."""
    arrays = {{k: np.zeros((batch, length), np.int32) for k in ("inputs", "position", "segment")}}
    for row in range(batch):
        at, segment = 0, 1
        while True:
            size = int(rng.integers(8, 61))
            if at + size > length:
                break
            arrays["inputs"][row, at : at + size] = rng.integers(3, vocab, size)
            arrays["position"][row, at : at + size] = np.arange(size)
            arrays["segment"][row, at : at + size] = segment
            at, segment = at + size, segment + 1
    out = {{"inputs": arrays["inputs"], "targets": arrays["inputs"].copy()}}
    for key in ("inputs", "targets"):
        out[key + "_position"] = arrays["position"]
        out[key + "_segmentation"] = arrays["segment"]
    return {{k: v.view(Tensor) for k, v in out.items()}}


def _padded(rng, batch, length, vocab):
    tokens = np.zeros((batch, length), np.int32)
    for row in range(batch):
        size = int(rng.integers(8, 61))
        tokens[row, :size] = rng.integers(3, vocab, size)
    return {{"inputs": tokens.view(Tensor), "targets": tokens.copy().view(Tensor)}}


class _Cycle:
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return itertools.cycle(self.batches)


def get_datasets(config, *, n_devices, vocab_path=None):
    rng = np.random.default_rng(0)
    vocab = config.vocab_size
    batch = config.per_device_batch_size * n_devices
    eval_batch = (config.eval_per_device_batch_size or config.per_device_batch_size) * n_devices
    train = [_packed(rng, batch, config.max_target_length, vocab) for _ in range(64)]
    evals = [_padded(rng, eval_batch, config.max_eval_target_length, vocab) for _ in range(8)]
    return _Cycle(train), evals, evals, Encoder(vocab)
'''

TENSORFLOW = {
    "tensorflow/__init__.py": (
        '"""Stand-in for what lm1b, clu and flax.io use of TensorFlow (not on the chip)."""\n'
        "import types\n\n"
        "from . import errors, io\n\n"
        "import ml_dtypes\nimport numpy as np\n\n"
        "bfloat16, float16, float32 = ml_dtypes.bfloat16, np.float16, np.float32\n"
        "config = types.SimpleNamespace(\n"
        "    experimental=types.SimpleNamespace(set_visible_devices=lambda *a, **k: None)\n"
        ")\n"
        "data = types.SimpleNamespace(Dataset=object)\n"
        "Tensor = object\n"
    ),
    "tensorflow/errors.py": "NotFoundError = FileNotFoundError\nOpError = OSError\n",
    "tensorflow/io/__init__.py": "from . import gfile\n",
    "tensorflow/io/gfile.py": (
        '"""gfile on the local disk (flax.io takes it for its file operations)."""\n'
        "import glob as _glob\nimport os\nimport shutil\n\n"
        "GFile = open\nexists = os.path.exists\nisdir = os.path.isdir\n"
        "listdir = os.listdir\nremove = os.remove\nrename = os.replace\n"
        "rmtree = shutil.rmtree\nglob = _glob.glob\ncopy = shutil.copy\n\n\n"
        "def makedirs(path):\n"
        "    os.makedirs(path, exist_ok=True)\n"
    ),
}

TENSORBOARD = {
    "tensorboard/__init__.py": "",
    "tensorboard/plugins/__init__.py": "",
    "tensorboard/plugins/hparams/__init__.py": "",
    "tensorboard/plugins/hparams/api.py": '"""Stand-in: clu imports it; the logging writer never calls it."""\n',
}


def copy_example(
    git_dir: str, out: Path, example: str, files: list[str], writer: str
) -> tuple[Path, str]:
    """Upstream's files of `examples/<example>` into OUT/<example>, its train.py with clu's
    writer logging only (its `writer` text made `just_logging=True`: clu's TensorBoard writer
    needs TensorFlow; the logging one reads the same scalars); (the folder, that train.py)."""
    folder = out / example
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    for name in files:
        (folder / name).write_text(show(git_dir, f"examples/{example}/{name}"))
    edits = [(writer, "just_logging=True")]
    train = edit_once(show(git_dir, f"examples/{example}/train.py"), edits, "train.py")
    (folder / "train.py").write_text(train)
    return folder, train


def write_stubs(out: Path, stubs: dict[str, str]) -> None:
    for path, text in stubs.items():
        (out / "stubs" / path).parent.mkdir(parents=True, exist_ok=True)
        (out / "stubs" / path).write_text(text)


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    lm1b, train = copy_example(git_dir, out, "lm1b", FILES, WRITER)
    (lm1b / "train_timed.py").write_text(edit_once(train, TIMED, "train.py"))
    main_py = (lm1b / "main.py").read_text()
    (lm1b / "main_timed.py").write_text(edit_once(main_py, MAIN_TIMED, "main.py"))
    (lm1b / "input_pipeline.py").write_text(PIPELINE)
    write_stubs(out, {**TENSORFLOW, **TENSORBOARD})


if __name__ == "__main__":
    main()
