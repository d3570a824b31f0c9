"""What JAX said differed between two compiles of a jitted function, and the fix.

The JAX collector stores JAX's own cache-miss explanations in the `retraces` table
(one row per difference against the closest earlier cache key); this module turns
them into the user's words (`batch['x']`, not a pytree path) and into the change
that stops the retrace. JAX advice only: a JAX run never gets torch_xla's.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from tpuscope.analyze.frames import records
from tpuscope.analyze.host_time import HostPart
from tpuscope.analyze.shapes import parse_shape

# the share of a function's traced time inside dispatches of ops outside jit that names them:
# JAX's own Python around each (an index's normalization) is not inside the dispatch events;
# on a v5e Equinox's loaders indexing device arrays held 0.39 and 0.45, loaders over numpy 0
EAGER_HOLDS = 1 / 3
_KWARG = re.compile(r"^\[1\]\['(?P<name>[^']+)'\](?P<rest>.*)$")
_POSITIONAL = re.compile(r"^\[0\]\[(?P<i>\d+)\](?P<rest>.*)$")


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def arg_name(path: str) -> str:
    """JAX's pytree paths of a call's (args, kwargs): `[0][1]` -> `args[1]`, `[1]['n']` -> `n`."""
    if match := _KWARG.match(path):
        return match["name"] + match["rest"]
    if match := _POSITIONAL.match(path):
        return f"args[{match['i']}]{match['rest']}"
    return path


def diffs_of(retraces: pd.DataFrame, index: int, function: str | None) -> list[dict[str, Any]]:
    """The retraces rows of one compile for its own function (a compile's trace also
    explains the jitted functions it calls)."""
    if retraces.empty or function is None:
        return []
    rows = retraces[(retraces["compile_index"] == index) & (retraces["function"] == function)]
    return [{k: (v if _known(v) else None) for k, v in r.items()} for r in records(rows)]


def diff_text(diff: dict[str, Any]) -> str:
    """A retraces row in words ("arg batch['x']: f32[32,64] -> f32[8,64]")."""
    kind, arg, before, after = diff["kind"], diff.get("arg"), diff.get("before"), diff.get("after")
    label = {
        "input_types": "arg",
        "static_arg": "static arg",
        "pytree": "input pytree at",
        "tracing_context": "tracing context",
        "input_sharding": "input sharding of",
    }.get(kind)
    if label and arg is not None:
        return f"{label} {arg_name(arg)}: {before} -> {after}"
    if kind == "redefined":
        return "a new function object on every call, so jit's cache never hits"
    return diff.get("detail") or kind


def changes_of(diffs: list[dict[str, Any]]) -> list[str]:
    return [diff_text(d) for d in diffs if d["kind"] != "first"]


def fix_for(function: str, diffs: list[dict[str, Any]], changes: list[str] | None = None) -> str:
    """The change that stops the retrace, from the first difference JAX reported; without an
    explanation (JAX_EXPLAIN_CACHE_MISSES=0), from the input-shape diff `changes`."""
    diff = next((d for d in diffs if d["kind"] != "first"), None)
    if diff is None and any("->" in c and "[" in c for c in changes or []):
        return (
            f"Keep the input shapes of {function} the same on every call: pad to a fixed size (or a "
            "few bucket sizes) and mask the padding."
        )
    kind, arg = (diff["kind"], arg_name(diff.get("arg") or "")) if diff else ("unknown", None)
    found: dict[str, Any] = diff or {}  # the kinds below come from a diff
    if kind == "input_sharding" or (kind == "input_types" and _sharding_only(found)):
        return sharding_fix(function, arg, found.get("before"), found.get("after"))
    if kind == "input_types":
        old = parse_shape(plain(found.get("before") or ""))  # 'f32[60000@batch,784]': its dims
        new = parse_shape(plain(found.get("after") or ""))
        if weak_only(found):
            return weak_fix(function, arg, found)
        if old and new and old.dims == new.dims:
            return (
                f"Pass {arg} with the same dtype on every call of {function} (cast it where it is "
                "made or on the way in, e.g. jnp.asarray(x, jnp.float32))."
            )
        return (
            f"Give {arg} the same shape on every call of {function}: pad it to a fixed size (or a "
            f"few bucket sizes) and mask the padding; pad or drop a short last batch."
        )
    if kind == "static_arg":
        return (
            f"Each new value of the static argument {arg} compiles {function} again: pass it as an "
            f"array (drop it from static_argnums/static_argnames) or keep it to a few values."
        )
    if kind == "pytree":
        return (
            f"Call {function} with the same pytree structure every time (same dict keys, list "
            f"lengths, None in the same places)."
        )
    if kind == "tracing_context":
        return _context_fix(function, arg, found)
    if kind == "redefined":
        return (
            f"{function} is jitted anew on every call (jax.jit inside a loop or a function, or a new "
            f"lambda/functools.partial each time): create the jitted function once and reuse it."
        )
    if kind == "debug_info":
        return f"Call {function} the same way every time (the same arguments by position or by keyword)."
    return (
        f"Keep the arguments of {function} the same from call to call: shapes, dtypes, pytree "
        "structure, static values."
    )


NEW_PHASE = (
    "If the size changed on purpose (a later phase of the loop at another length, as diffrax's "
    "neural ODE example trains on 10% of each series, then on all of it), each size compiles "
    "once and padding the first phase to the second's size would slow its every step: JAX's "
    'persistent compilation cache (`jax.config.update("jax_compilation_cache_dir", ...)`) '
    "loads the compiled step in the next run instead."
)
_WEAK = re.compile(r"\{weak_type=(?:True|False)\}")


def weak_only(diff: dict[str, Any]) -> bool:
    """An argument whose type changed in its weak type alone (`f32[]{weak_type=True}` ->
    `f32[]{weak_type=False}`): JAX keys its cache on it, so the same shape and dtype compile
    again."""
    before, after = str(diff.get("before") or ""), str(diff.get("after") or "")
    return (
        diff.get("kind") == "input_types"
        and "weak_type" in before + after
        and _WEAK.sub("", before) == _WEAK.sub("", after)
    )


def weak_retrace(diffs: list[dict[str, Any]]) -> bool:
    """Every argument JAX named as changed changed its weak type alone."""
    named = [d for d in diffs if d["kind"] != "first"]
    return bool(named) and all(weak_only(d) for d in named)


def weak_fix(function: str, arg: str | None, diff: dict[str, Any]) -> str:
    """A weak type flipped: an array made from a Python scalar without a dtype is weakly typed,
    what a jitted step computes from it is not, so passing the step's result back (a model's
    scalar parameter, its optimizer state) compiles the step again. diffrax's neural ODE
    example on a v5e: its `jnp.array(1.0)` scale compiled the step twice, 13.9 s of 87.4 s."""
    return (
        f"{arg} was weakly typed at one call of {function} and not at another "
        f"({diff.get('before')} -> {diff.get('after')}): an array made from a Python scalar "
        "without a dtype (`jnp.array(1.0)`, `jnp.asarray(0.5)`) is weakly typed, and what a "
        "jitted step returns from it is not, so passing the step's result back compiles the "
        "step again. Give it its dtype where it is made (`jnp.array(1.0, dtype=jnp.float32)`, "
        "`jnp.float32(1.0)`), or cast it on the way in (`jnp.asarray(x, jnp.float32)`)."
    )


def _context_fix(function: str, setting: str | None, diff: dict[str, Any]) -> str:
    """A JAX setting or context that differed between two calls; a mesh context by name: JAX's
    spmd_mnist_classifier_fromscratch example calls its step inside `jax.set_mesh(mesh)` in its
    loop and once outside it after each epoch, compiling it twice."""
    before, after = diff.get("before"), diff.get("after")
    if "mesh" in f"{setting} {before} {after}".lower():
        return (
            f"{function} was called under one mesh context and then under another or none "
            f"({before} -> {after}): call it under the same `jax.set_mesh(mesh)` every time (or "
            "outside it every time); each context compiles it again."
        )
    return (
        f"A JAX setting or context differed between calls of {function} ({setting}: {before} -> "
        f"{after}): set it once, before the first call."
    )


_SHARDED_DIM = re.compile(r"@(?:\([^)]*\)|\w+)")
_SHARDING_SUFFIX = re.compile(r"\(\{.*\}\)$")


def plain(text: str) -> str:
    """'f32[32@batch,64]({Explicit: ('batch',)})' -> 'f32[32,64]' (collect/jax/explain.plain_type's
    rule, for runs stored before the collector told sharding changes apart)."""
    return _SHARDED_DIM.sub("", _SHARDING_SUFFIX.sub("", text.strip()))


def _sharding_only(diff: dict[str, Any]) -> bool:
    before, after = diff.get("before") or "", diff.get("after") or ""
    return before != after and plain(before) == plain(after)


def sharding_fix(function: str, arg: str | None, before: str | None, after: str | None) -> str:
    """The fix when an argument came with the same dtype and shape on another sharding: each
    input sharding is its own executable."""
    return (
        f"{arg} reached {function} with the same dtype and shape on another sharding ({before} -> "
        f"{after}), and {function} is compiled for its inputs' shardings: keep each argument's sharding the "
        f"same on every call. Place the inputs once, before the loop, where {function} returns them "
        f"(`jax.device_put(x, sharding)` with that NamedSharding; for jax.jit, or pin in_shardings= / "
        f"out_shardings=); a deliberate change of layout costs one compile per layout, done before the "
        f"loop rather than inside it."
    )


# Flax NNX only (no torch_xla twin): the host's traced time went into nnx.jit's graph traversal
# (analyze/host_time.NNX_GRAPH)
NNX_GRAPH_FIX = (
    "Flax NNX: `nnx.jit` flattens and unflattens the Modules' graph at every call. Call the "
    "step through `nnx.cached_partial(train_step, model, optimizer, ...)`, which does that "
    "once and passes only the batch at each call (on a v5e the NNX MNIST tutorial's step "
    "took 1.24 ms a step so, against 2.24 ms through `nnx.jit`), or jit a function of "
    "`nnx.split`'s state with `jax.jit`."
)


def own_function_fix(part: HostPart, share: float) -> str:
    """A function of the program's own that held the host (`part`, its share of the traced
    host time): in every host-bound run the chip saw, its input pipeline (optax's CIFAR ResNet
    notebook augmenting each image in Python: batches made once took its epoch from 35.87 to
    19.27 ms a training step; Equinox's RNN loader indexing device arrays: 3.01 of 4.82 ms).
    Where EAGER_HOLDS of its time or more went to dispatching ops outside jit, it names them:
    a loader that indexes device arrays launches each index op on the device."""
    text = f"The program's own {part.label} held {100 * share:.0f}% of the host's traced time"
    if part.eager_s_per_step >= EAGER_HOLDS * part.s_per_step > 0:
        return (
            f"{text}, {100 * part.eager_s_per_step / part.s_per_step:.0f}% of it inside the "
            f"dispatches of ops outside jit, one device launch each ({', '.join(part.eager_ops)}"
            "; JAX's Python around them is not counted): do that "
            "work in numpy on host copies (`np.asarray(array)` once, before the loop: indexing "
            "a numpy array with numpy indices launches nothing) or inside the jitted step. On "
            "a v5e, Equinox's RNN example's loader over numpy copies took its step from 4.82 to "
            "1.81 ms, its score-based diffusion example's from 7.64 to 6.98 ms (docs/tpu.md)."
        )
    return (
        f"{text}: take its work off the step's path (make the next inputs in a background "
        "thread or process while the step runs, and hand them over ready), or do its "
        "per-example work on the device, inside the jitted step."
    )


def keras_host_fix(step: str) -> str:
    """Keras's `fit` on a host-bound step (detect/compile_kinds.keras_step: Keras's own train_step,
    at `step`): fit already jits the step, so the generic advice (one jax.jit, jax.lax.scan) is
    not the program's to follow; Keras's own option is. On keras-io's MNIST convnet on a v5e
    (tests/tpu/programs/keras_mnist.py, docs/tpu.md) steps_per_execution=32 took a batch from
    1.62 to 1.06 ms by the program's own epoch timing."""
    return (
        f"Keras's `fit` runs this loop and already jits its step ({step}): between the device's "
        "steps the host runs Keras's work around each call (its callbacks and logs, the next "
        "batch taken from the arrays and sent to the device). Let each call run several batches "
        "(if it does not already): `model.compile(..., steps_per_execution=N)` runs N batches a "
        "call and the callbacks once per N (keras-io's MNIST convnet on a v5e: 1.62 ms a batch, "
        "1.06 ms with N=32); a larger batch_size gives each batch more device work."
    )


# Keras's own way to compute in bf16 (the f32 card where Keras's `fit` runs the step): keras-io's
# Xception on a v5e took 101.47 ms a step under float32 and 68.22 ms so (docs/tpu.md)
KERAS_BF16_FIX = (
    'Compute in bf16 the Keras way: `keras.mixed_precision.set_global_policy("mixed_bfloat16")` '
    "before the model is built; its layers then compute in bf16 and keep their variables in "
    'float32 (give the last layer `dtype="float32"` so the model\'s outputs stay float32, as '
    "Keras's mixed precision guide says). On a v5e keras-io's Xception image classifier took "
    "101.47 ms a step under float32 and 68.22 ms so."
)
KERAS_PRECISION = (
    " The policy leaves `jax_default_matmul_precision` as it is: drop 'highest' (or 'high') "
    "where f32 accuracy is not needed."
)


# a batch dim of two sizes where Keras's `fit` runs the step: its last batch of each epoch
KERAS_SHORT_BATCH = (
    "Keras's `fit` (and `evaluate`) cuts the arrays into batches of batch_size and ends each "
    "pass on a short batch where the samples (each split's, with validation_split) are not a "
    "multiple of it: give it a whole number of batches (trim the arrays), or a dataset batched "
    "with drop_remainder=True."
)


# The words other rules need, for a JAX run (detect/advice.py picks by the run's backend;
# xla_advice.ADVICE holds the same topics in torch_xla's words).
ADVICE = {
    "host_bound": (
        "Keep the device fed: put the whole step under one jax.jit, keep float()/print/np.asarray "
        "of arrays out of the step, prefetch the next batch to the device (jax.device_put) while "
        "the step runs, and raise the batch (or run several steps per call with jax.lax.scan) so "
        "each step has more device work."
    ),
    "bf16": (
        "Run the matmuls in bf16: bf16 params and inputs (`x.astype(jnp.bfloat16)`, a Flax "
        "module's dtype=jnp.bfloat16), and drop precision='highest' (or "
        "jax_default_matmul_precision='highest') where bf16 passes do; keep f32 master weights in "
        "the optimizer."
    ),
    "attention_kernel": "jax.nn.dot_product_attention, Pallas splash attention",
    "same_step_on_hosts": (
        "Make every host run the same step: keep host-dependent work (logging, float() reads, "
        "checkpoint writes) out of the jitted step, or do it every N steps on all hosts alike "
        "(not only where jax.process_index() == 0), and give every host's data the same shapes "
        "(pad to a common size), so each host compiles and runs the same programs."
    ),
    "persistent_cache": (
        "JAX's persistent compilation cache "
        "(`jax.config.update('jax_compilation_cache_dir', '/path/to/cache')`)"
    ),
    "drop_last": "drop_remainder=True in a tf.data or Grain batch, or stop at the last full batch",
}

CACHE_FIX = (
    "Compiles that must stay can be kept across runs with JAX's persistent compilation cache: "
    "`jax.config.update('jax_compilation_cache_dir', '/path/to/cache')` before the first call."
)
