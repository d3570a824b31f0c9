"""Keras 3's `fit` on JAX running the model without jit: its ops dispatched one by one.

Keras jits its train step only where `model.jit_compile` is true, and with `jit_compile="auto"`
(its default) that holds only when every layer of the model supports jit; `jit_compile=True`
gives way too ("Model doesn't support `jit_compile=True`"), and `run_eagerly=True` turns it off.
keras-io's Vision Transformer keeps its augmentation in the model, RandomRotation and RandomZoom
among it, so on a v5e its `fit` dispatched 3,459 ops a batch, each compiled on its own the first time (552
compiles, 104 s), at 14 s a batch (tests/tpu/runs/keras_vit_eager, docs/tpu.md).

The evidence: the run's eager dispatches (call_sites, kind `eager_dispatch`) come mostly from
Keras's own files, and no Keras step function was jitted. Which of Keras's reasons turned jit
off is not in the run; a layer Keras's source marks `supports_jit = False` is named where its
ops ran.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.detect.compile_kinds import keras_step
from tpuscope.detect.tables import RunTables

KERAS_FILES = "keras/"  # a call site's library frame, as collected: keras/src/ops/numpy.py:287
KERAS_SHARE = 0.5  # of the eager dispatches, what makes the op-by-op loop Keras's
# Keras 3.x layers whose __init__ sets `self.supports_jit = False` (keras/src/layers/preprocessing;
# LSTM and GRU do too, on the TensorFlow backend only)
NO_JIT_LAYERS = {
    "random_rotation.py": "RandomRotation",
    "random_zoom.py": "RandomZoom",
    "random_translation.py": "RandomTranslation",
    "random_shear.py": "RandomShear",
    "random_crop.py": "RandomCrop",
    "random_perspective.py": "RandomPerspective",
    "string_lookup.py": "StringLookup",
    "integer_lookup.py": "IntegerLookup",
    "index_lookup.py": "a lookup layer",
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
    if sites.empty or "library_frame" not in sites:
        return None
    eager = sites[sites["kind"] == "eager_dispatch"]
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
        "Keras ran the model without jit: its `fit` jits the step only where "
        '`model.jit_compile` is true, which `jit_compile="auto"` (the default) and '
        "`jit_compile=True` both give up when a layer does not support jit, and "
        f"`run_eagerly=True` turns off. {named}With jit, `fit` runs each batch as one compiled "
        "program instead of thousands of ops dispatched and compiled one by one."
    )
