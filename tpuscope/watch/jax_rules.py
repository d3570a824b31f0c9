"""How a watch treats JAX: each watched block compiles its jitted functions afresh.

A watch judges compiles by graph family (tpuscope.analyze.families: for JAX, the
jitted function): each function's first compile in the block is a first compile,
every further one a recompile (a retrace: new shapes, dtypes, pytree, tracing
context, a re-definition). Compiles of single operations outside `jit` (eager ops,
such as `jnp.ones` in the test body) are counted but never judged: the `op_by_op`
rule reports hot eager loops.

"First compile in the block" equals "first call" only if the first call in the block
compiles; a shape an earlier test compiled would not, and the verdict would depend on
test order. So a watch with warm-up clears JAX's in-memory caches as it starts
(`jax.clear_caches()`): every watched test compiles its functions afresh and is
judged on its own calls alone. With `warmup_compiles=0` the caches are kept, so a block
run after its own warm-up must compile nothing.
"""

from __future__ import annotations

import sys


def clear_caches(warmup_compiles: int) -> bool:
    """Give the watch a cold JAX (see the module doc); never imports JAX itself."""
    jax = sys.modules.get("jax")
    if warmup_compiles <= 0 or jax is None or not hasattr(jax, "clear_caches"):
        return False
    jax.clear_caches()
    return True
