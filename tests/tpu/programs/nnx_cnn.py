"""The CNN of Flax's NNX MNIST tutorial (flax.readthedocs.io, "MNIST tutorial"): two `nnx.Conv`
layers with ReLU and average pooling, two `nnx.Linear`, float32 throughout; `nnx.Optimizer`
with optax's AdamW, `nnx.MultiMetric` updated inside an `nnx.jit` train step, a batch of 32,
the metrics computed (read) every `--eval-every` steps. Synthetic images, no download.

    nnx_cnn.py [--batch 32] [--steps 200] [--eval-every 50] [--cached]

--cached calls the step through `nnx.cached_partial(train_step, model, optimizer, metrics)`,
the fast path of Flax's "Performance considerations" guide (the graph of the Modules is
traversed once, not at every call). Prints `step_ms <mean step time over the timed steps>`.
"""

import argparse
import time
from functools import partial

import jax
import optax
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--eval-every", type=int, default=50)
parser.add_argument("--cached", action="store_true", help="nnx.cached_partial over the step")
args = parser.parse_args()


class CNN(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
        self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x):
        x = self.avg_pool(nnx.relu(self.conv1(x)))
        x = self.avg_pool(nnx.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)
        x = nnx.relu(self.linear1(x))
        return self.linear2(x)


model = CNN(rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(0.005, 0.9), wrt=nnx.Param)
metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))


def loss_fn(model: CNN, batch):
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    return loss, logits


@nnx.jit
def train_step(model: CNN, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])
    optimizer.update(model, grads)


key = jax.random.PRNGKey(1)
batch = {
    "image": jax.random.uniform(key, (args.batch, 28, 28, 1)),
    "label": jax.random.randint(key, (args.batch,), 0, 10),
}
step = nnx.cached_partial(train_step, model, optimizer, metrics) if args.cached else None
WARM = 10
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(nnx.state(model))
        t0 = time.perf_counter()
    if step is not None:
        step(batch)
    else:
        train_step(model, optimizer, metrics, batch)
    if (i + 1) % args.eval_every == 0:
        computed = metrics.compute()  # the tutorial logs its metrics, then resets them
        metrics.reset()
jax.block_until_ready(nnx.state(model))
elapsed = time.perf_counter() - t0
print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} loss {float(computed['loss']):.4f}")
