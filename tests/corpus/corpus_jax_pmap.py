"""Data-parallel training with `jax.pmap` over host CPU devices, in the idiom of Flax's pmap examples.

Idiom: google/flax examples/imagenet (linen era) and the Hugging Face Flax examples: the device
count forced with `--xla_force_host_platform_device_count` in XLA_FLAGS before JAX starts (the
CPU recipe of JAX's docs), `p_train_step = jax.pmap(train_step, axis_name='batch')` whose grads
and metrics are averaged with `lax.pmean`, `p_eval_step = jax.pmap(eval_step, axis_name='batch')`,
the state replicated with `flax.jax_utils.replicate`, every batch split across devices with
`flax.training.common_utils.shard`, metrics fetched with `common_utils.get_metrics` (a
`jax.device_get`) every `log_every_steps` and logged with `float(...)`, and an MLP as a params
pytree with optax.sgd. One epoch of 12 train batches (12 iterations), then the eval pass. Two
real compiles again, measured (JAX_LOG_COMPILES): `p_train_step` compiles at iteration 0 and
again at iteration 1 with the same shapes and shardings in its log: `replicate` puts the state
on a mesh whose axis is `_device_put_sharded`, the step returns it on its own 'batch' mesh, and
a new input sharding is a new cache key. The eval set (40 samples, batches of 16) keeps its
short last batch, as a loader without `drop_last` does: sharded, it is 4 per device instead of
8, so `p_eval_step` compiles again for it after running its second batch from the cache (the
recompile `pad_shard_unpad` exists to avoid).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import hook  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import jax_utils  # noqa: E402
from flax.training import common_utils  # noqa: E402

BATCH, TRAIN_BATCHES, LOG_EVERY_STEPS, FEATURES, EVAL_SAMPLES, EVAL_BATCH = 32, 12, 12, 64, 40, 16

optimizer = optax.sgd(0.05, momentum=0.9)


def init_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (FEATURES, 128)) * 0.05, "b1": jnp.zeros(128),
            "w2": jax.random.normal(k2, (128, 10)) * 0.05, "b2": jnp.zeros(10)}


def logits_of(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def compute_metrics(logits: jax.Array, labels: jax.Array) -> dict[str, jax.Array]:
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return jax.lax.pmean({"loss": loss, "accuracy": accuracy}, axis_name="batch")


def train_step(params: dict[str, jax.Array], opt_state: optax.OptState,
               batch: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], optax.OptState, dict[str, jax.Array]]:
    def loss_fn(p: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        logits = logits_of(p, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean(), logits

    (_, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    grads = jax.lax.pmean(grads, axis_name="batch")
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, compute_metrics(logits, batch["y"])


def eval_step(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return compute_metrics(logits_of(params, batch["x"]), batch["y"])


p_train_step = jax.pmap(train_step, axis_name="batch")
p_eval_step = jax.pmap(eval_step, axis_name="batch")


def main() -> None:
    hook.start("jax")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((TRAIN_BATCHES * BATCH, FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, TRAIN_BATCHES * BATCH).astype(np.int32)
    x_eval = rng.standard_normal((EVAL_SAMPLES, FEATURES), dtype=np.float32)
    y_eval = rng.integers(0, 10, EVAL_SAMPLES).astype(np.int32)
    params = init_params(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    params, opt_state = jax_utils.replicate(params), jax_utils.replicate(opt_state)
    print(f"devices {jax.local_device_count()}")
    perm = rng.permutation(len(x))
    train_metrics = []
    for step in range(TRAIN_BATCHES):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        idx = perm[step * BATCH:(step + 1) * BATCH]
        batch = common_utils.shard({"x": x[idx], "y": y[idx]})
        params, opt_state, metrics = p_train_step(params, opt_state, batch)  # corpus: step-call
        train_metrics.append(metrics)
        if (step + 1) % LOG_EVERY_STEPS == 0:
            summary = common_utils.get_metrics(train_metrics)  # corpus: get-metrics
            print(f"step {step + 1} train loss {float(summary['loss'].mean()):.4f}")
            train_metrics = []
    eval_metrics = []
    for start in range(0, EVAL_SAMPLES, EVAL_BATCH):
        hook.mark(f"eval:b{start // EVAL_BATCH}")
        batch = common_utils.shard({"x": x_eval[start:start + EVAL_BATCH], "y": y_eval[start:start + EVAL_BATCH]})
        eval_metrics.append(p_eval_step(params, batch))  # corpus: eval-call
    hook.mark("eval-end")
    summary = common_utils.get_metrics(eval_metrics)
    print(f"eval accuracy {float(summary['accuracy'].mean()):.4f}")
    hook.finish(iterations=TRAIN_BATCHES)


if __name__ == "__main__":
    main()
