"""A jitted MLP update over NamedSharding inputs on a Mesh of host CPU devices, resharded mid-run.

Idiom: JAX's "Distributed arrays and automatic parallelization" tutorial (its neural-network
section): `predict` / `loss` over a list of `(W, b)` layers, one `@jax.jit def update(params,
batch)` of plain gradient descent, first 4-way batch data parallelism (the batch
`jax.device_put` with `NamedSharding(mesh, P('batch'))` on a 1-d mesh, the params replicated
with `P()`), then, as the tutorial goes on, the same `update` called with a 2-d
('batch', 'model') mesh: the batch on `P('batch', None)` and each weight on `P(None, 'model')`.
Host CPU devices are forced with `--xla_force_host_platform_device_count` in XLA_FLAGS before
JAX starts. 6 iterations of each layout, 12 in all; the loss is read with `float(...)` at each
layout's end. The new layout's first call compiles `update` again at the same shapes and
dtypes: the one recompile of the run, caused by the input shardings alone.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import hook  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYER_SIZES, BATCH, ITERATIONS_PER_LAYOUT = [64, 128, 128, 8], 32, 6

Params = list[tuple[jax.Array, jax.Array]]


def init_layer(key: jax.Array, n_in: int, n_out: int) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, (n_in, n_out)) / jnp.sqrt(n_in), jax.random.normal(k2, (n_out,))


def init_model(key: jax.Array) -> tuple[Params, tuple[jax.Array, jax.Array]]:
    keys = jax.random.split(key, len(LAYER_SIZES))
    params = [init_layer(k, n_in, n_out) for k, n_in, n_out in zip(keys[1:], LAYER_SIZES[:-1], LAYER_SIZES[1:], strict=True)]
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((BATCH, LAYER_SIZES[0]), dtype=np.float32)
    targets = rng.standard_normal((BATCH, LAYER_SIZES[-1]), dtype=np.float32)
    return params, (jnp.asarray(inputs), jnp.asarray(targets))


def predict(params: Params, inputs: jax.Array) -> jax.Array:
    for w, b in params:
        outputs = jnp.dot(inputs, w) + b
        inputs = jnp.maximum(outputs, 0)
    return outputs


def loss(params: Params, batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    inputs, targets = batch
    return jnp.mean(jnp.sum((predict(params, inputs) - targets) ** 2, axis=-1))


@jax.jit
def update(params: Params, batch: tuple[jax.Array, jax.Array]) -> Params:
    grads = jax.grad(loss)(params, batch)
    return [(w - 0.005 * dw, b - 0.005 * db) for (w, b), (dw, db) in zip(params, grads, strict=True)]


def train(params: Params, batch: tuple[jax.Array, jax.Array], layout: str, start: int) -> Params:
    for i in range(ITERATIONS_PER_LAYOUT):  # corpus: train-loop
        hook.mark(f"train:{layout}:i{start + i}")
        params = update(params, batch)  # corpus: step-call
    print(f"{layout}: loss {float(loss(params, batch)):.4f}")  # corpus: loss-read
    return params


def main() -> None:
    hook.start("jax")
    params, batch = init_model(jax.random.key(0))

    mesh = jax.make_mesh((4,), ("batch",))
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch")))
    params = jax.device_put(params, NamedSharding(mesh, P()))
    params = train(params, batch, "data-parallel", 0)

    mesh = jax.make_mesh((2, 2), ("batch", "model"))
    batch = jax.device_put(batch, NamedSharding(mesh, P("batch", None)))
    params = [(jax.device_put(w, NamedSharding(mesh, P(None, "model"))),
               jax.device_put(b, NamedSharding(mesh, P("model")))) for w, b in params]
    params = train(params, batch, "data+model-parallel", ITERATIONS_PER_LAYOUT)
    hook.finish(iterations=2 * ITERATIONS_PER_LAYOUT)


if __name__ == "__main__":
    main()
