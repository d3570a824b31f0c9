"""JAX in each eager mode, and the bundled MLP written in JAX (same shapes as the PyTorch one).

- strict: op-by-op dispatch. The step is traced once per input signature into a
          jaxpr (as jit would), then every equation is dispatched on its own, as an
          un-jitted JAX program runs: one small executable per primitive, launched
          asynchronously.
- debug:  the same dispatch with `jax.block_until_ready` after every equation
          (JAX's counterpart of launch-blocking).
- fused:  `jax.jit(step)`: the whole step as one XLA program.
Strict and debug share one dispatch path so their difference is exactly the
blocking. Tracing once, not per step, leaves Python autodiff overhead out of
strict, so the fused speedup shown is a lower bound for an un-jitted loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp

from tpuscope.bench.models import POOL, SIZES, Workload
from tpuscope.bench.modes import CompileCount, ModeRunner, Unavailable

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_MECHANISM = {
    "strict": "jaxpr traced once, each equation dispatched op by op (async)",
    "debug": "op-by-op dispatch with jax.block_until_ready after every equation",
    "fused": "jax.jit(step)",
}


class OpByOp:
    """Run a function one primitive at a time, like an un-jitted JAX program.

    Mirrors `jax.core.eval_jaxpr` (bind each equation's primitive on concrete
    arrays) and adds the optional block after each equation.
    """

    def __init__(self, fn: Callable[..., Any], block: bool) -> None:
        self.fn, self.block = fn, block
        self.ops = 0
        self._cache: dict[Any, tuple[Any, Any]] = {}

    def _trace(self, args: tuple[Any, ...]) -> tuple[Any, Any]:
        leaves, treedef = jax.tree_util.tree_flatten(args)
        key = (treedef, tuple((leaf.shape, leaf.dtype) for leaf in leaves))
        if key not in self._cache:
            closed, out_shape = jax.make_jaxpr(self.fn, return_shape=True)(*args)
            self._cache[key] = (closed, jax.tree_util.tree_structure(out_shape))
        return self._cache[key]

    def __call__(self, *args: Any) -> Any:
        closed, out_tree = self._trace(args)
        outs = self._eval(closed.jaxpr, closed.consts, jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(out_tree, outs)

    def _eval(self, jaxpr: Any, consts: list[Any], args: list[Any]) -> list[Any]:
        env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts, strict=True))
        env.update(zip(jaxpr.invars, args, strict=True))

        def read(var: Any) -> Any:
            return var.val if isinstance(var, jax.extend.core.Literal) else env[var]

        for eqn in jaxpr.eqns:
            params = eqn.primitive.get_bind_params(eqn.params)
            subfuns, params = params if isinstance(params, tuple) else ((), params)
            ans = eqn.primitive.bind(*subfuns, *map(read, eqn.invars), **params)
            outs = ans if eqn.primitive.multiple_results else [ans]
            if self.block:
                jax.block_until_ready(outs)
            self.ops += 1
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]


def mlp_workload(size: str, device: Any, seed: int) -> Workload:
    """The bundled MLP (3 Linear, GELU, cross-entropy, AdamW) as a pure JAX step."""
    try:
        import optax
    except ImportError as exc:
        raise Unavailable("the JAX MLP needs optax (pip install optax)") from exc
    dims = SIZES[size]
    batch, width, hidden, classes = (
        dims["mlp_batch"],
        dims["mlp_in"],
        dims["mlp_hidden"],
        dims["mlp_classes"],
    )
    keys = jax.random.split(jax.random.PRNGKey(seed), 3 + 2 * POOL)
    shapes = [(width, hidden), (hidden, hidden), (hidden, classes)]
    params = [
        {"w": jax.random.normal(k, s) / jnp.sqrt(s[0]), "b": jnp.zeros(s[1])}
        for k, s in zip(keys[:3], shapes, strict=True)
    ]
    opt = optax.adamw(1e-3)

    def loss_fn(params: Any, x: Any, y: Any) -> Any:
        for layer in params[:-1]:
            x = jax.nn.gelu(x @ layer["w"] + layer["b"])
        logits = x @ params[-1]["w"] + params[-1]["b"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def step(state: Any, x: Any, y: Any) -> Any:
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    pool = [
        (
            jax.device_put(jax.random.normal(keys[3 + 2 * i], (batch, width)), device),
            jax.device_put(jax.random.randint(keys[4 + 2 * i], (batch,), 0, classes), device),
        )
        for i in range(POOL)
    ]
    state = jax.device_put((params, opt.init(params)), device)
    return Workload(
        step=step,
        inputs=lambda i: pool[i % POOL],
        samples=lambda i: batch,
        info={"batch": batch, "in": width, "hidden": hidden, "classes": classes, "state": True},
        state=state,
    )


class JaxRunner(ModeRunner):
    backend = "jax"

    def __init__(self, mode: str) -> None:
        self.mode, self.mechanism = mode, _MECHANISM[mode]
        self._device = jax.devices()[0]
        self._compiles, self._compile_ns = 0, 0
        self._lock = threading.Lock()
        self._op_by_op: OpByOp | None = None
        self._steps = 0
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)

    def _on_duration(self, event: str, seconds: float, **kwargs: Any) -> None:
        if event == _COMPILE_EVENT:
            with self._lock:
                self._compiles += 1
                self._compile_ns += int(seconds * 1e9)

    def device(self) -> Any:
        return self._device

    def build(self, model: str, size: str, seed: int, steps: int) -> Workload:
        if model != "mlp":
            raise Unavailable(f"no JAX version of model {model!r} (it has: mlp)")
        return mlp_workload(size, self._device, seed)

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        if self.mode == "fused":
            return jax.jit(step)
        self._op_by_op = OpByOp(step, block=self.mode == "debug")
        return self._op_by_op

    def run_step(self, fn: Callable[..., Any], workload: Workload, args: tuple[Any, ...]) -> Any:
        # StepTraceAnnotation marks the step for jax.profiler and tpuscope's JAX collector.
        with jax.profiler.StepTraceAnnotation("bench", step_num=self._steps):
            self._steps += 1
            if workload.state is None:
                return fn(*args)
            workload.state, out = fn(workload.state, *args)
            return workload.state, out

    def finish(self, out: Any) -> None:
        jax.block_until_ready(out)

    def compile_count(self) -> CompileCount:
        with self._lock:
            return CompileCount(count=self._compiles, ns=self._compile_ns)

    def device_memory(self) -> tuple[int | None, str | None]:
        stats = self._device.memory_stats() if hasattr(self._device, "memory_stats") else None
        if stats and "peak_bytes_in_use" in stats:
            return int(stats["peak_bytes_in_use"]), None
        return None, f"jax: {self._device.platform} device reports no memory stats"

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "mechanism": self.mechanism,
            "device_kind": self._device.device_kind,
        }
        if self._op_by_op is not None and self._steps:
            info["ops_per_step"] = round(self._op_by_op.ops / self._steps, 1)
        return info


def make_runner(mode: str) -> JaxRunner:
    return JaxRunner(mode)
