"""Keras 3's `fit` on JAX running the model without jit: its ops dispatched one by one.

Keras jits its train step only where `model.jit_compile` is true, and with `jit_compile="auto"`
(its default) that holds only when every layer of the model supports jit; `jit_compile=True`
gives way too ("Model doesn't support `jit_compile=True`"), and `run_eagerly=True` turns it off.
keras-io's Vision Transformer keeps its augmentation in the model, RandomRotation and RandomZoom
among it, so on a v5e its `fit` dispatched about 3,400 ops a batch (34,119 at the `fit` line in
10 batches), each compiled on its own the first time (552 compiles, 104 s), at 14 s a batch
(tests/tpu/runs/keras_vit_eager, docs/tpu.md).

The evidence: the judged steps run op by op (rule op_by_op's trigger), their eager dispatches
(call_sites, kind `eager_dispatch`) come from Keras's own files (KERAS_SHARE of them), and no
Keras step function was jitted. A loop of the program's own that calls a Keras model un-jitted
looks the same in these rows (no frame says `fit`), so the fix says both. Which of Keras's
reasons turned jit off is not in the run; a layer Keras's source marks `supports_jit = False`
is named where its ops ran.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.detect import common
from tpuscope.detect.compile_kinds import keras_step
from tpuscope.detect.eager_counts import runs_op_by_op
from tpuscope.detect.tables import RunTables

KERAS_FILES = "keras/"  # a call site's library frame, as collected: keras/src/ops/numpy.py:287
KERAS_SHARE = 0.9  # of the judged steps' eager dispatches (the ViT's: 99.5%)
# Keras 3.15's layers whose __init__ sets `self.supports_jit = False` (keras/src/layers/
# preprocessing; LSTM and GRU do too, on the TensorFlow backend only)
NO_JIT_LAYERS = {
    "random_rotation.py": "RandomRotation",
    "random_zoom.py": "RandomZoom",
    "random_translation.py": "RandomTranslation",
    "random_shear.py": "RandomShear",
    "random_crop.py": "RandomCrop",
    "random_perspective.py": "RandomPerspective",
    "string_lookup.py": "StringLookup",
    "integer_lookup.py": "IntegerLookup",
    "index_lookup.py": "StringLookup or IntegerLookup",
    "text_vectorization.py": "TextVectorization",
    "hashing.py": "Hashing",
    "hashed_crossing.py": "HashedCrossing",
}


def keras_eager_layers(tables: RunTables) -> list[str] | None:
    """Where Keras ran the model op by op: the layers that do not support jit whose ops ran
    (as 'RandomZoom (random_zoom.py)'; empty when none was seen), else None."""
    if tables.backend != "jax" or keras_step(tables.meta) is not None:
        return None
    sites = tables.extra.get("call_sites", pd.DataFrame())
    if sites.empty or "library_frame" not in sites or not runs_op_by_op(tables):
        return None
    eager = common.judged_rows(sites[sites["kind"] == "eager_dispatch"], tables.judged)
    frames = eager["library_frame"].fillna("").astype(str)
    total = float(eager["count"].sum())
    keras = frames.str.startswith(KERAS_FILES)
    if not total or float(eager.loc[keras, "count"].sum()) < KERAS_SHARE * total:
        return None
    seen = []
    for frame in sorted(set(frames[keras])):
        file = frame.rsplit("/", 1)[-1].split(":", 1)[0]
        label = f"{NO_JIT_LAYERS[file]} ({file})" if file in NO_JIT_LAYERS else None
        if label and label not in seen:
            seen.append(label)
    return seen


def keras_eager_fix(layers: list[str]) -> str:
    """Rule op_by_op's fix where Keras ran the model op by op."""
    them = "them" if len(layers) > 1 else "it"
    named = (
        f"This run's ops came from {', '.join(layers)}, which Keras's source marks "
        f"`supports_jit = False`: take {them} out of the model (apply {them} to the batches "
        "before they reach `fit`, in the data pipeline). "
        if layers
        else "Find the reason in `model.jit_compile` and the layers' `supports_jit`. "
    )
    return (
        "Keras's ops ran one by one, the model not jitted. Where Keras's `fit` (or `evaluate`, "
        "`predict`) runs the loop, it jits the step only where `model.jit_compile` is true, "
        'which `jit_compile="auto"` (the default) and `jit_compile=True` both give up when a '
        f"layer does not support jit, and `run_eagerly=True` turns off. {named}With jit, `fit` "
        "runs each batch as one compiled program. In a loop of your own, put the step under "
        "`jax.jit` (with the model's `stateless_call`)."
    )
