"""Make patrick-kidger/diffrax's neural ODE example notebook runnable on the chip as a program,
with the twin its truth needs, as chip_diffrax.sh runs them (the snapshot is fetched, never
committed):

    python3 diffrax_examples.py SNAPSHOT_GIT_DIR OUT

- `neural_ode.py` (docs/examples/neural_ode.ipynb): its code cells joined in order, unchanged.
  A neural ODE (an MLP of width 64, depth 2, as the vector field) fitted by `diffeqsolve`
  (Tsit5, adaptive steps in a while loop) under `jax.vmap`, batches of 32 drawn by indexing
  device arrays, an `eqx.filter_jit` step with optax's adabelief; 500 steps on the first 10%
  of each series, then 500 on all of it; a print every 100 steps; the fitted model plotted
  (MPLBACKEND=Agg: the plot is written to neural_ode.png).
- `neural_ode_strong.py`: the twin whose learnt scalar is made with its dtype,
  `jnp.array(1.0, dtype=jnp.float32)`, not weakly typed as upstream's `jnp.array(1.0)` is: the
  truth of what the first update (which returns the scalar strongly typed) costs upstream.
"""

from __future__ import annotations

import sys
from pathlib import Path

from eqx_examples import notebook_code
from jax_examples import edit_once

STRONG = [
    (
        "        self.out_scale = jnp.array(1.0)\n",
        "        self.out_scale = jnp.array(1.0, dtype=jnp.float32)\n",
    )
]


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    program = "\n\n".join(notebook_code(git_dir, "neural_ode")) + "\n"
    (out / "neural_ode.py").write_text(program)
    (out / "neural_ode_strong.py").write_text(edit_once(program, STRONG, "neural_ode"))


if __name__ == "__main__":
    main()
