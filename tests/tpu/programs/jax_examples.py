"""Make a jax-ml/jax snapshot's `examples/` runnable on the chip, and their bf16 twins, as
chip_upstream.sh runs them (the snapshot is fetched, never committed):

    python3 jax_examples.py SNAPSHOT_GIT_DIR OUT

- `datasets.mnist_raw` returns synthetic arrays of MNIST's shapes and dtypes (the chip has no
  network); everything after it is upstream's own code.
- mnist_classifier.py, mnist_vae.py and spmd_mnist_classifier_fromscratch.py read their
  epoch count from MNIST_EPOCHS / VAE_EPOCHS / SPMD_EPOCHS.
- `OUT/stubs`: stand-ins for matplotlib (the VAE saves a picture each epoch) and dp_accounting
  (the DP-SGD example's privacy accountant, run on the host after each epoch).
- `*_bf16.py`: each f32 example's twin as the f32 card's fix writes it, bf16 compute over f32
  parameters (the model's parameters and inputs cast to bf16 inside the loss; the optimizer
  and its state stay f32): the truth the f32 card is held to.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FILES = ["__init__.py", "datasets.py", "mnist_classifier.py", "mnist_vae.py"]
FILES += ["differentially_private_sgd.py", "spmd_mnist_classifier_fromscratch.py"]
CAST = "jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)"
EDITS = {  # file: [(upstream text, replacement)], each found exactly once
    "mnist_classifier.py": [
        (
            "num_epochs = 10\n",
            'num_epochs = int(__import__("os").environ.get("MNIST_EPOCHS", 10))\n',
        )
    ],
    "mnist_vae.py": [
        ("num_epochs = 100\n", 'num_epochs = int(os.environ.get("VAE_EPOCHS", 100))\n')
    ],
    "spmd_mnist_classifier_fromscratch.py": [
        ("num_epochs = 10\n", 'num_epochs = int(__import__("os").environ.get("SPMD_EPOCHS", 10))\n')
    ],
}
TWINS = {
    "mnist_vae.py": [
        (
            "-elbo(elbo_rng, params, batch)",
            f"-elbo(elbo_rng, {CAST}, batch.astype(jnp.bfloat16))",
        )
    ],
    "differentially_private_sgd.py": [
        ("import jax.numpy as jnp\n", "import jax\nimport jax.numpy as jnp\n"),
        (
            "logits = predict(params, inputs)",
            f"logits = predict({CAST}, inputs.astype(jnp.bfloat16)).astype(jnp.float32)",
        ),
    ],
}
SYNTHETIC = '''def mnist_raw():
  """Synthetic stand-in (no network on the chip): MNIST's shapes and dtypes."""
  rng = np.random.RandomState(0)
  train_images = rng.randint(0, 256, (60000, 28, 28)).astype(np.uint8)
  train_labels = rng.randint(0, 10, 60000).astype(np.uint8)
  test_images = rng.randint(0, 256, (10000, 28, 28)).astype(np.uint8)
  test_labels = rng.randint(0, 10, 10000).astype(np.uint8)
  return train_images, train_labels, test_images, test_labels


'''
STUBS = {
    "matplotlib/__init__.py": "",
    "matplotlib/pyplot.py": "class cm:\n    gray = None\n\n\ndef imsave(*args, **kwargs):\n    return None\n",
    "dp_accounting/__init__.py": "from dp_accounting import dp_event, rdp  # noqa: F401\n",
    "dp_accounting/dp_event.py": (
        "class GaussianDpEvent:\n    def __init__(self, *a):\n        pass\n\n\n"
        "class PoissonSampledDpEvent:\n    def __init__(self, *a):\n        pass\n"
    ),
    "dp_accounting/rdp/__init__.py": "from dp_accounting.rdp import rdp_privacy_accountant  # noqa: F401\n",
    "dp_accounting/rdp/rdp_privacy_accountant.py": (
        "class RdpAccountant:\n    def __init__(self, orders):\n        pass\n\n"
        "    def compose(self, event, count):\n        pass\n\n"
        "    def get_epsilon(self, delta):\n        return 0.0\n"
    ),
}


def edit_once(text: str, edits: list[tuple[str, str]], name: str) -> str:
    """`text` with each (upstream text, replacement) made, each found exactly once (a snapshot
    that no longer holds it stops here, not with a silently different program)."""
    for old, new in edits:
        if text.count(old) != 1:
            raise SystemExit(f"{name}: {old!r} found {text.count(old)} times in this snapshot")
        text = text.replace(old, new)
    return text


def snapshot_file(git_dir: str, path: str) -> str:
    """A file of the snapshot's HEAD (a fetched mirror has no work tree)."""
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    (out / "examples").mkdir(parents=True, exist_ok=True)
    for name in FILES:
        text = snapshot_file(git_dir, f"examples/{name}")
        if name == "datasets.py":
            start, end = text.index("def mnist_raw():"), text.index("def mnist(permute_train")
            text = text[:start] + SYNTHETIC + text[end:]
        text = edit_once(text, EDITS.get(name, []), name)
        (out / "examples" / name).write_text(text)
        if name in TWINS:
            twin = edit_once(text, TWINS[name], name)
            (out / "examples" / name.replace(".py", "_bf16.py")).write_text(twin)
    for path, text in STUBS.items():
        (out / "stubs" / path).parent.mkdir(parents=True, exist_ok=True)
        (out / "stubs" / path).write_text(text)


if __name__ == "__main__":
    main()
