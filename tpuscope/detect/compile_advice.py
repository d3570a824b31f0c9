"""Rule `compile_time`'s words: the persistent cache as the runtime reported it, the program's
earlier runs, and the fix for the backend that ran (detect/compile_time.py decides; this module
only words). A run whose cache was on is never told to turn it on: it is told what the cache
did (loaded, wrote, or left out as too small) and what is left to change."""

from __future__ import annotations

from typing import Any

from tpuscope.detect.common import UNKNOWN_LOCATION, file_and_line

EAGER_SHARE = 0.1  # eager compiles worth "jit the setup": this share of the first compiles
JAX_MIN_S = 1.0  # jax_persistent_cache_min_compile_time_secs's default
JAX_CACHE = (
    "Turn on JAX's persistent compilation cache, before the first jitted call: "
    '`jax.config.update("jax_compilation_cache_dir", "/path/to/cache")` (or '
    "JAX_COMPILATION_CACHE_DIR=/path/to/cache); the next run of the same program loads each "
    "executable instead of compiling it (tracing and lowering still run)."
)
JAX_MIN_TIME = (
    " JAX writes only compiles of {min_s:g} s or more (jax_persistent_cache_min_compile_time_secs): "
    "{n} of this run's first compiles ({s:.1f} s) were shorter; "
    '`jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)` caches them too.'
)
XLA_CACHE = (
    "Turn on torch_xla's persistent compilation cache at the top of the program, before any XLA "
    'computation: `torch_xla.runtime.initialize_cache("/path/to/cache", readonly=False)` '
    "(one writer; other processes readonly=True); the next run loads each graph it compiled "
    "instead of compiling it."
)


def cache_text(cache: dict[str, Any] | None, backend: str) -> str:
    """What the runtime said of the persistent cache in this run."""
    cache = cache or {}
    if not cache.get("on"):
        if backend == "jax" and cache.get("backend") == "jax":
            return "Persistent compilation cache: off (jax_compilation_cache_dir not set)."
        if cache.get("backend") == "torch_xla":
            return "Persistent compilation cache: off (XLA_PERSISTENT_CACHE_PATH not set)."
        return "Persistent compilation cache: not recorded for this run."
    where = f" at {cache.get('dir')}" if cache.get("dir") else ""
    hits, misses, unwritten = (int(cache.get(k) or 0) for k in ("hits", "misses", "unwritten"))
    said = [
        f"{hits} loaded from it ({float(cache.get('loaded_s') or 0):.2f} s, tracing and lowering included)"
        if hits
        else "",
        f"{misses} compiled and written to it" if misses else "",
        f"{unwritten} compiled and not written (under its minimum compile time or entry size)"
        if unwritten
        else "",
    ]
    failed = int(cache.get("load_failures") or 0)
    said.append(
        f"{failed} found in it that torch_xla could not load (PersistentCacheDeserializeFailure) "
        "and compiled again"
        if failed
        else ""
    )
    said = [s for s in said if s]
    return f"Persistent compilation cache: on{where}" + (
        f"; of the first compiles, {', '.join(said)}." if said else "."
    )


def history_text(history: dict[str, Any], cache: dict[str, Any] | None = None) -> str:
    """'compiled in each of your last 4 runs: 13.6 s each' and what a cache would have saved
    (not said when this run's cache was on and could not load what it held: it was on)."""
    each = history["seconds_each"]
    typical = sum(each) / len(each)
    runs = ", ".join(history["run_ids"][:3]) + ("..." if len(history["run_ids"]) > 3 else "")
    said = (
        f"The same {history['graphs']} graph{'s' * (history['graphs'] != 1)} compiled in each of "
        f"your last {history['runs']} runs of this program in this store (this one and {runs}): "
        f"{typical:.1f} s each ({', '.join(f'{s:.1f}' for s in each)} s, newest first)."
    )
    if int((cache or {}).get("load_failures") or 0):
        return said
    later = history["runs"] - 1
    return said + (
        f" A persistent cache on since the oldest of them would have saved about "
        f"{history['saved_s']:.1f} s (the backend compile of the {later} later "
        f"run{'s' * (later != 1)}, which would have loaded them)."
    )


def _eager_lines(parts: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    group = next((g for g in parts if g["kind"] == "eager"), None)
    if group is None:
        return None, ""
    return group, _line_list(group["lines"])


def _line_list(lines: list[dict[str, Any]]) -> str:
    return ", ".join(file_and_line(line["location"]) for line in lines[:3])


def _jax_fix(
    parts: list[dict[str, Any]],
    cache: dict[str, Any],
    step_recompiled: bool,
    short: tuple[int, float],
    keras: str | None,
    keras_eager: bool = False,
) -> list[str]:
    out = []
    unwritten = int(cache.get("unwritten") or 0)
    setting = cache.get("min_compile_time_s")
    min_s = JAX_MIN_S if setting is None else float(setting)
    if not cache.get("on"):
        out.append(JAX_CACHE)
        if short[0]:
            out.append(JAX_MIN_TIME.format(min_s=min_s, n=short[0], s=short[1]).strip())
    elif unwritten:
        out.append(
            f"The cache left {unwritten} compile{'s' * (unwritten != 1)} out (under "
            f"jax_persistent_cache_min_compile_time_secs = {min_s} s or the minimum entry size): "
            '`jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)` writes them too.'
        )
    elif int(cache.get("misses") or 0):
        out.append(
            "Nothing to turn on: the cache was on and wrote this run's compiles; the next run of the "
            "same program loads them."
        )
    else:
        out.append("Nothing to turn on: the persistent cache was on and served this run's graphs.")
    group, lines = _eager_lines(parts)
    total = sum(g["seconds"] for g in parts)
    if keras_eager:  # Keras's fit ran the model op by op (detect/keras_fit.py)
        if group is not None and group["seconds"] >= EAGER_SHARE * total:
            out.append(
                f"The ops compiled one by one at {lines} ({group['compiles']} compiles, "
                f"{group['seconds']:.1f} s) are Keras's model run without jit (rule op_by_op's "
                "card): with jit, `fit` compiles its step as one program instead."
            )
        return out
    if keras is not None:  # Keras builds the model and calls the step
        if group is not None and group["seconds"] >= EAGER_SHARE * total:
            out.append(
                f"The ops compiled one by one at {lines} ({group['compiles']} compiles, "
                f"{group['seconds']:.1f} s) are Keras's own: its layers make their variables "
                f"op by op outside `jit`, and its `fit` calls the step ({keras}). The program "
                "cannot jit them; the persistent cache is what saves them."
            )
        return out
    if group is not None and group["seconds"] >= EAGER_SHARE * total:
        out += _eager_advice(group, total)
    called = next((g for g in parts if g["kind"] == "callback"), None)
    if called is not None and called["seconds"] >= EAGER_SHARE * total:
        out.append(
            f"The ops compiled at {_line_list(called['lines'])} ({called['compiles']} compiles, "
            f"{called['seconds']:.1f} s) are a host callback's: its Python ran JAX ops on its "
            "arguments (jax.Arrays) outside jit, each compiled at its first shape (rule "
            "host_callback's card, at the callback's line). Made numpy arrays first, they "
            "compile nothing."
        )
    step = next((g for g in parts if g["kind"] == "step"), None)
    if step is not None and not step_recompiled:
        out.append(
            f"Where the step's shapes are fixed, compile {_step_named(step)} ahead of the loop "
            "with `.lower(*example_args).compile()` and call the result: the compile happens once, "
            "where you choose (before the data pipeline starts, or in a job that fills the cache), "
            "and a call with other shapes is an error instead of a silent compile."
        )
    return out


def _eager_advice(group: dict[str, Any], total: float) -> list[str]:
    """What to jit of the ops compiled one by one: the setup (before the loop), and an
    evaluation after the loop where its compiles hold EAGER_SHARE of the compile time or more."""
    after_s = float(group.get("after_s") or 0.0)
    before_s = group["seconds"] - after_s
    out = []
    lines = group.get("before_lines") or group["lines"]
    before = group.get("before_lines") or []
    lone = [line for line in before if line["compiles"] == 1 and line["seconds"] >= LONE_S]
    several = [line for line in lines if line not in lone]
    left = group["compiles"] - int(group.get("after_compiles") or 0) - len(lone)
    if (after_s < before_s or before_s >= EAGER_SHARE * total) and several and left > 0:
        lone_s = sum(float(line["seconds"]) for line in lone)
        out.append(
            f"Jit the setup that runs op by op at {_line_list(several)}: outside `jit` each op "
            "compiles on its own "
            f"({left} compiles, "
            f"{before_s - lone_s:.1f} s here); "
            "`params = jax.jit(init)(key)` (for Flax, `jax.jit(model.init)(key, x)`; for Flax "
            "NNX, the model built inside `nnx.jit`: `model = nnx.jit(lambda: Model(..., "
            "rngs=nnx.Rngs(0)))()`) compiles it once, as one executable (and one cache entry)."
        )
    if lone:
        out.append(_lone_text(lone))
    if after_s >= EAGER_SHARE * total:
        out.append(
            f"The ops compiled one by one at {_line_list(group['after_lines'])} "
            f"({group['after_compiles']} compiles, {after_s:.1f} s) ran after the loop, outside "
            "`jit` (a model evaluated un-jitted, each op compiled and launched on its own): jit "
            "the function that runs them (`jax.jit`, `eqx.filter_jit`, `nnx.jit`), and it "
            "compiles once, as one program, and runs as one launch a call."
        )
    return out


LONE_S = 1.0  # a line whose one eager compile took this long is told apart


def _lone_text(lone: list[dict[str, Any]]) -> str:
    """Lines whose one op outside jit took long to compile (equinox's score-based diffusion
    example on a v5e: `jr.permutation` of 60,000 indices in its data loader, 13.1 s): jitting
    that op alone compiles the same program, so that advice would not shorten it; the
    persistent cache, which keeps compiles of 1 s or more, does."""
    named = ", ".join(
        f"{file_and_line(line['location'])}"
        + (f" ({line['functions'][0]})" if line["functions"] else "")
        + f" {float(line['seconds']):.1f} s"
        for line in lone[:3]
    )
    one = len(lone) == 1
    return (
        f"{'One op' if one else 'Ops'} outside jit took long to compile on {'its' if one else 'their'} "
        f"own at {named}: jitting {'it' if one else 'one'} alone compiles the same program; the "
        "persistent compilation cache keeps it for the next run (or do that work in numpy, on "
        "the host, where it needs no compile)."
    )


def _step_named(step: dict[str, Any]) -> str:
    """The step's costliest jitted function and the line calling it (its lines are costliest
    first, each line's functions too)."""
    costliest = next((line for line in step["lines"] if line["functions"]), None)
    if costliest is None:
        return "the step function"
    where = file_and_line(costliest["location"])
    called = f" (called at {where})" if where != UNKNOWN_LOCATION else ""
    return f"the jitted `{costliest['functions'][0]}`{called}"


def _xla_fix(cache: dict[str, Any]) -> list[str]:
    if not cache.get("on"):
        return [XLA_CACHE]
    if int(cache.get("load_failures") or 0):
        return [
            "The persistent cache was on, but torch_xla could not load the "
            f"{cache['load_failures']} entries it found (PersistentCacheDeserializeFailure) and "
            "compiled them again: an entry written by another torch_xla version or device does not "
            "load (torch_xla 2.9's CPU backend fails on its own entries). Point each version and "
            "device at its own cache folder."
        ]
    if int(cache.get("hits") or 0):
        return [
            "Nothing to turn on: the persistent cache was on and loaded graphs "
            f"({cache['hits']} PersistentCacheHit); the rest compiled and were written to it."
        ]
    return [
        "Nothing to turn on: the persistent cache was on; this run filled it, and the next run of "
        "the same program loads what it wrote."
    ]


def fix_text(
    parts: list[dict[str, Any]],
    cache: dict[str, Any] | None,
    backend: str,
    history: dict[str, Any] | None,
    step_recompiled: bool,
    short: tuple[int, float] = (0, 0.0),
    keras: str | None = None,
    keras_eager: bool = False,
) -> str:
    """The changes, most valuable first, for the backend that ran. `short`: the first compiles
    whose backend compile took under JAX_MIN_S (JAX's default minimum for writing one), and
    their seconds. `step_recompiled`: no advice to compile the step ahead (set too where the
    step is a library's function the program does not call itself). `keras`: Keras's step function,
    where Keras's `fit` runs the loop: no advice to jit the setup or compile the step ahead,
    which Keras does, not the program; `keras_eager`: Keras's `fit` ran the model op by op
    (detect/keras_fit.py), so its ops compiled one by one are not setup to jit."""
    cache = cache or {}
    out = (
        _jax_fix(parts, cache, step_recompiled, short, keras, keras_eager)
        if backend == "jax"
        else _xla_fix(cache)
    )
    if history and not cache.get("on"):
        out.append(
            f"Over your last {history['runs']} runs it would have saved about {history['saved_s']:.1f} s."
        )
    return " ".join(out)
