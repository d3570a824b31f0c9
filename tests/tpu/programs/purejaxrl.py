"""Make luchris429/purejaxrl's `purejaxrl/ppo.py` runnable on the chip, with the twins its truth
needs, as chip_rl.sh runs it (the snapshot is fetched, never committed):

    python3 purejaxrl.py SNAPSHOT_GIT_DIR OUT

`ppo.py` is upstream's, unchanged: PPO on gymnax's CartPole-v1, the whole training (976 updates
of 4 environments x 128 steps) one `jax.jit` call, `lax.scan` over the updates, with its DEBUG
config on: a `jax.debug.callback` at each update prints the returns of the episodes that ended,
indexing the callback's arguments (jax.Arrays) with a boolean mask. `wrappers.py` is upstream's
too; `OUT/stubs` stands in for brax and navix, which its other wrappers import at the top
(ppo.py uses neither; neither is installable on the chip). gymnax 0.0.9 (the API ppo.py
calls), distrax and its tfp-nightly, chex and gymnasium travel as wheels.

Twins, the truth of what a card could say:
- `ppo_numpy.py`: the callback's arguments made numpy arrays first
  (`info = jax.tree_util.tree_map(np.asarray, info)`), the same prints;
- `ppo_nodebug.py`: DEBUG off (no callback at all).

`timed_main.py PROGRAM` runs a program as `__main__` with its own `jax.jit` calls (those made in
the program's file) compiled ahead and timed apart: "TIMED compile S s run S s" on stderr, the
run the call's device work and callbacks until its result is ready.
"""

from __future__ import annotations

import sys
from pathlib import Path

from jax_examples import edit_once, snapshot_file

CALLBACK = "                def callback(info):\n"
AS_NUMPY = "                    info = jax.tree_util.tree_map(np.asarray, info)\n"

STUBS = {
    "brax/__init__.py": '"""Stand-in: purejaxrl\'s wrappers.py imports brax (unused by ppo.py)."""\n',
    "brax/envs/__init__.py": (
        "def get_environment(*args, **kwargs):\n"
        '    raise NotImplementedError("brax is not installed here")\n'
    ),
    "brax/envs/wrappers/__init__.py": "",
    "brax/envs/wrappers/training.py": "EpisodeWrapper = AutoResetWrapper = object\n",
    "navix/__init__.py": (
        'def make(*args, **kwargs):\n    raise NotImplementedError("navix is not installed here")\n'
    ),
}

TIMED_MAIN = '''"""Run PROGRAM as __main__; its own jax.jit calls compiled ahead and timed apart."""
import runpy
import sys
import time

import jax

_jit = jax.jit


def jit(fun, *args, **kwargs):
    jitted = _jit(fun, *args, **kwargs)
    if sys._getframe(1).f_globals.get("__name__") != "__main__":
        return jitted  # a library's jit (gymnax's, flax's)

    def timed(*call_args, **call_kwargs):
        began = time.perf_counter()
        compiled = jitted.lower(*call_args, **call_kwargs).compile()
        compiled_at = time.perf_counter()
        out = jax.block_until_ready(compiled(*call_args, **call_kwargs))
        done = time.perf_counter()
        print(f"TIMED compile {compiled_at - began:.3f} s run {done - compiled_at:.3f} s",
              file=sys.stderr, flush=True)
        return out

    return timed


jax.jit = jit
program = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(program, run_name="__main__")
'''


def main() -> None:
    git_dir, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    ppo = snapshot_file(git_dir, "purejaxrl/ppo.py")
    (out / "ppo.py").write_text(ppo)
    (out / "wrappers.py").write_text(snapshot_file(git_dir, "purejaxrl/wrappers.py"))
    (out / "ppo_numpy.py").write_text(edit_once(ppo, [(CALLBACK, CALLBACK + AS_NUMPY)], "ppo"))
    debug = [('"DEBUG": True', '"DEBUG": False')]
    (out / "ppo_nodebug.py").write_text(edit_once(ppo, debug, "ppo"))
    (out / "timed_main.py").write_text(TIMED_MAIN)
    for name, text in STUBS.items():
        path = out / "stubs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


if __name__ == "__main__":
    main()
