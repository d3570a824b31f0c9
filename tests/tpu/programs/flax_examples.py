"""Make two of a google/flax snapshot's examples runnable on the chip, as chip_flax.sh runs them
(the snapshot is fetched, never committed):

    python3 flax_examples.py SNAPSHOT_GIT_DIR OUT

- `OUT/seq2seq/`: `examples/seq2seq` (an LSTM encoder-decoder learning addition, linen, its
  batches made in Python each step by `CharacterTable.get_batch`), upstream's files unchanged.
  `train_timed.py`: the same loop printing its wall time every `decode_frequency` steps (the
  example prints nothing of its own), and `train_fixed.py`: that timed loop fed 16 batches
  made before it, so the two give what `get_batch` costs the step.
- `OUT/nnx_vae/05_vae.py`: `examples/nnx_toy_examples/05_vae.py` (an NNX VAE, `nnx.jit`, its
  loss read back with `np.asarray` each step), its epoch count from VAE_EPOCHS.
  `05_vae_timed.py` prints each epoch's wall time; `05_vae_nosync.py` is that timed copy
  keeping the losses on the device until the epoch ends: what the per-step read costs;
  `05_vae_reads.py` also prints the host's mean time in the read itself.
- `OUT/stubs`: stand-ins for what the chip cannot fetch or show: `clu.metric_writers`
  (scalars read to the host, as the real writer does, and logged), HuggingFace `datasets`
  (synthetic MNIST of its shapes and dtype) and matplotlib's pyplot (draws nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

from jax_examples import edit_once, snapshot_file  # beside this file: its folder is on the path

SEQ2SEQ = ["train.py", "models.py", "input_pipeline.py"]
LOOP = """  for step in range(FLAGS.num_train_steps):
    batch = ctable.get_batch(FLAGS.batch_size)
"""
TIMED_LOOP = """  import time
  began = time.perf_counter()
  for step in range(FLAGS.num_train_steps):
    batch = ctable.get_batch(FLAGS.batch_size)
"""
FIXED_LOOP = """  import time
  made = [ctable.get_batch(FLAGS.batch_size) for _ in range(16)]
  began = time.perf_counter()
  for step in range(FLAGS.num_train_steps):
    batch = made[step % 16]
"""
DECODED = "      decode_batch(state, batch, rng, ctable)\n"
TIMED_DECODED = """      decode_batch(state, batch, rng, ctable)
      print(f"steps {step}: {time.perf_counter() - began:.4f} s", flush=True)
"""
VAE_EDITS = [
    ("epochs: int = 20\n", 'epochs: int = int(__import__("os").environ.get("VAE_EPOCHS", 20))\n')
]
VAE_TIMED = [
    (
        "for epoch in range(epochs):\n",
        "import time\nfor epoch in range(epochs):\n  began = time.perf_counter()\n",
    ),
    (
        "  print(f'Epoch {epoch} loss: {np.mean(losses)}')\n",
        "  print(f'Epoch {epoch} loss: {np.mean(losses)} ({time.perf_counter() - began:.4f} s)')\n",
    ),
]
VAE_READTIME = [
    ("  began = time.perf_counter()\n", "  began = time.perf_counter()\n  read_s = 0.0\n"),
    (
        "    losses.append(np.asarray(loss))\n",
        "    read_at = time.perf_counter()\n    losses.append(np.asarray(loss))\n"
        "    read_s += time.perf_counter() - read_at\n",
    ),
    (" s)')\n", " s, reads {1e3 * read_s / steps_per_epoch:.4f} ms a step)')\n"),
]
VAE_NOSYNC = [
    ("    losses.append(np.asarray(loss))\n", "    losses.append(loss)\n"),
    ("{np.mean(losses)}", "{np.mean(jnp.stack(losses))}"),
]
STUBS = {
    "clu/__init__.py": "",
    "clu/metric_writers.py": (
        '"""Stand-in for clu.metric_writers: reads the scalars to the host and logs them."""\n'
        "from absl import logging\n\n\n"
        "class _Writer:\n"
        "    def write_scalars(self, step, scalars):\n"
        "        logging.info('step %d: %s', step, {k: float(v) for k, v in scalars.items()})\n\n\n"
        "def create_default_writer(logdir=None, **kwargs):\n"
        "    return _Writer()\n"
    ),
    "datasets/__init__.py": (
        '"""Stand-in for HuggingFace datasets (no network on the chip): synthetic MNIST."""\n'
        "import numpy as np\n\n\n"
        "def load_dataset(name, *args, **kwargs):\n"
        "    rng = np.random.RandomState(0)\n"
        "    image = lambda n: rng.randint(0, 256, (n, 28, 28)).astype(np.uint8)\n"
        "    return {'train': {'image': image(60000)}, 'test': {'image': image(10000)}}\n"
    ),
    "matplotlib/__init__.py": "",
    "matplotlib/pyplot.py": (
        '"""Stand-in for pyplot: draws nothing."""\n\n\n'
        "def __getattr__(name):\n"
        "    return lambda *args, **kwargs: None\n"
    ),
}


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    seq = out / "seq2seq"
    seq.mkdir(parents=True, exist_ok=True)
    for name in SEQ2SEQ:
        (seq / name).write_text(snapshot_file(git_dir, f"examples/seq2seq/{name}"))
    train = (seq / "train.py").read_text()
    timed = edit_once(train, [(LOOP, TIMED_LOOP), (DECODED, TIMED_DECODED)], "train.py")
    (seq / "train_timed.py").write_text(timed)
    (seq / "train_fixed.py").write_text(edit_once(timed, [(TIMED_LOOP, FIXED_LOOP)], "train.py"))
    vae_dir = out / "nnx_vae"
    vae_dir.mkdir(parents=True, exist_ok=True)
    vae = edit_once(snapshot_file(git_dir, "examples/nnx_toy_examples/05_vae.py"), VAE_EDITS, "05_vae.py")
    (vae_dir / "05_vae.py").write_text(vae)
    vae_timed = edit_once(vae, VAE_TIMED, "05_vae.py")
    (vae_dir / "05_vae_timed.py").write_text(vae_timed)
    (vae_dir / "05_vae_nosync.py").write_text(edit_once(vae_timed, VAE_NOSYNC, "05_vae.py"))
    (vae_dir / "05_vae_reads.py").write_text(edit_once(vae_timed, VAE_READTIME, "05_vae.py"))
    for path, text in STUBS.items():
        (out / "stubs" / path).parent.mkdir(parents=True, exist_ok=True)
        (out / "stubs" / path).write_text(text)


if __name__ == "__main__":
    main()
