"""Measure a set of XLA programs on the chip: the table the cost model is checked against.

    python3 benchmarks/tpu_cost_table.py OUT_DIR [--reps 20] [--only NAME,...]

Each program (matmuls of several shapes and precisions, attention at several head_dims,
elementwise and reduction steps that HBM bounds, convolutions) is jitted, compiled, run once,
then timed bare: the median over --reps calls of the wall time from the call to its result
ready. Then all of them run again, 3 times each, inside one `jax.profiler` trace (each call in
a `StepTraceAnnotation` named after the program), written under OUT_DIR/trace. OUT_DIR/table.json
holds each program's name, description, wall median (us), FLOPs and bytes of its inputs and
output, the device and the JAX version. `tpuscope import OUT_DIR/trace` then gives each XLA
op's measured time beside the cost model's estimate (tests/test_tpu_cost_table.py reads it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

BF16, F32 = jnp.bfloat16, jnp.float32


def matmul(m: int, k: int, n: int, dtype=BF16, precision=None):
    def f(a, b):
        return jnp.matmul(a, b, precision=precision)

    shapes = [((m, k), dtype), ((k, n), dtype)]
    return f, shapes, 2 * m * k * n


def attention(batch: int, heads: int, seq: int, head_dim: int):
    def f(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / head_dim**0.5
        p = jax.nn.softmax(s.astype(F32), axis=-1).astype(BF16)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v)

    shape = ((batch, heads, seq, head_dim), BF16)
    return f, [shape] * 3, 4 * batch * heads * seq * seq * head_dim


def elementwise(n: int):
    def f(a, b):
        return jax.nn.gelu(a * b + 1.0)

    return f, [((n,), BF16), ((n,), BF16)], 0


def reduction(rows: int, cols: int):
    def f(a):
        return jnp.sum(a.astype(F32), axis=-1)

    return f, [((rows, cols), BF16)], 0


def layernorm(rows: int, cols: int):
    def f(a):
        a = a.astype(F32)
        mu = a.mean(-1, keepdims=True)
        return ((a - mu) * jax.lax.rsqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-6)).astype(
            BF16
        )

    return f, [((rows, cols), BF16)], 0


def conv(batch: int, hw: int, cin: int, cout: int, kernel: int = 3):
    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    flops = 2 * batch * hw * hw * cin * cout * kernel * kernel
    return f, [((batch, hw, hw, cin), BF16), ((kernel, kernel, cin, cout), BF16)], flops


PROGRAMS = {
    "matmul_bf16_8192": matmul(8192, 8192, 8192),
    "matmul_bf16_4096": matmul(4096, 4096, 4096),
    "matmul_bf16_2048": matmul(2048, 2048, 2048),
    "matmul_bf16_1024": matmul(1024, 1024, 1024),
    "matmul_bf16_512": matmul(512, 512, 512),
    "matmul_bf16_4000": matmul(4000, 4000, 4000),
    "matmul_bf16_1000": matmul(1000, 1000, 1000),
    "matmul_bf16_k64": matmul(8192, 64, 8192),
    "matmul_bf16_n64": matmul(8192, 8192, 64),
    "matmul_bf16_k96": matmul(8192, 96, 8192),
    "matmul_bf16_m16": matmul(16, 8192, 8192),
    "matmul_f32_default_4096": matmul(4096, 4096, 4096, F32),
    "matmul_f32_highest_4096": matmul(4096, 4096, 4096, F32, jax.lax.Precision.HIGHEST),
    "matmul_f32_high_4096": matmul(4096, 4096, 4096, F32, jax.lax.Precision.HIGH),
    "attention_hd64": attention(8, 16, 1024, 64),
    "attention_hd128": attention(8, 8, 1024, 128),
    "attention_hd256": attention(8, 4, 1024, 256),
    "elementwise_64m": elementwise(64 * 2**20),
    "reduction_8192x8192": reduction(8192, 8192),
    "layernorm_16384x1024": layernorm(16384, 1024),
    "conv_64ch": conv(32, 56, 64, 64),
    "conv_256ch": conv(32, 28, 256, 256),
    "conv_3to64_7x7": conv(32, 112, 3, 64, 7),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in PROGRAMS if not args.only or n in args.only.split(",")]
    compiled, rows = {}, []
    for i, name in enumerate(names):
        fn, shapes, flops = PROGRAMS[name]
        keys = jax.random.split(jax.random.PRNGKey(i), len(shapes))
        inputs = [
            jax.random.normal(k, s, F32).astype(d) for k, (s, d) in zip(keys, shapes, strict=True)
        ]
        fn.__name__ = name  # the module's name in the trace: jit_<name>
        call = jax.jit(fn).lower(*inputs).compile()
        jax.block_until_ready(call(*inputs))
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            jax.block_until_ready(call(*inputs))
            times.append(time.perf_counter() - t)
        io_bytes = sum(x.size * x.dtype.itemsize for x in inputs)
        result = call(*inputs)
        io_bytes += result.size * result.dtype.itemsize
        compiled[name] = (call, inputs)
        rows.append(
            {
                "name": name,
                "wall_us": 1e6 * statistics.median(times),
                "wall_min_us": 1e6 * min(times),
                "flops": flops,
                "io_bytes": int(io_bytes),
            }
        )
        print(f"{name:28s} {rows[-1]['wall_us']:10.1f} us", flush=True)
    jax.profiler.start_trace(str(out / "trace"))
    for name in names:
        call, inputs = compiled[name]
        for r in range(3):
            with jax.profiler.StepTraceAnnotation(name, step_num=r):
                jax.block_until_ready(call(*inputs))
    jax.profiler.stop_trace()
    dev = jax.devices()[0]
    (out / "table.json").write_text(
        json.dumps(
            {
                "device_kind": dev.device_kind,
                "platform": dev.platform,
                "jax_version": jax.__version__,
                "command": "python3 benchmarks/tpu_cost_table.py OUT_DIR",
                "programs": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
