"""Three small JAX steps, then one jit call whose XLA compile takes tens of seconds on the CPU
(an unrolled scan: the time is in the C++ compiler, where no Python code runs). For the test
that SIGTERM ends a profiled program during a compile as at once as it ends the bare one.

usage: long_compile.py PIDFILE [UNROLL]   writes its pid, prints "steps done", then "compiling"
just before the call.
"""

import os
import sys

import jax
import jax.numpy as jnp

with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])

step = jax.jit(lambda x: x * 1.5 + 1)
x = jnp.ones((8, 8))
for _ in range(3):
    x = step(x).block_until_ready()
print("steps done", flush=True)

unroll = int(sys.argv[2]) if len(sys.argv) > 2 else 80


def body(carry: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array]:
    carry = jnp.sort(jnp.tanh(carry @ carry.T * 0.01 + i), axis=0)
    return carry, carry.sum()


big = jax.jit(lambda c: jax.lax.scan(body, c, jnp.arange(unroll, dtype=jnp.float32), unroll=unroll))
print("compiling", flush=True)
big(jnp.ones((16, 16)))
print("compiled", flush=True)
