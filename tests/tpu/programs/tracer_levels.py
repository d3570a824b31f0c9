"""What JAX's profiler records at each host tracer level, and what its stop costs, on a loop
that feeds the device a 77 MB numpy batch a step (as flax's imagenet example does: libtpu's
threads log each batch's layout as some 400k `Transpose` events) beside a jitted step, a
compile inside the window and Python the tracer sees (chip_flax.sh 8, session 35):

    python3 tracer_levels.py OUT_JSON

For host_tracer_level 1, 2 (JAX's default) and 3: 5 traced steps, the stop's seconds, the
events by host line and the count of the names tpuscope's rules read (`$` Python calls,
`PjitFunction(...)` dispatches, compiles)."""

from __future__ import annotations

import collections
import glob
import json
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.profiler import ProfileData, ProfileOptions


@jax.jit
def step(w, x):
    return w - 1e-3 * jnp.mean(x) * w, jnp.sum(x)


def loop(w, batch, steps):
    for i in range(steps):
        x = jax.device_put(batch)
        w, total = step(w, x)
        if i == steps - 1:  # a compile inside the window
            jax.jit(lambda v: v * 2)(w).block_until_ready()
    return w, float(total)


def census(path: str) -> dict:
    data = ProfileData.from_file(path)
    lines: collections.Counter = collections.Counter()
    names: collections.Counter = collections.Counter()
    for plane in data.planes:
        if not plane.name.startswith("/host"):
            continue
        for line in plane.lines:
            for event in line.events:
                lines[line.name] += 1
                name = event.name
                kind = (
                    "python"
                    if name.startswith("$")
                    else "dispatch"
                    if name.startswith("PjitFunction")
                    else name
                )
                names[kind] += 1
    keep = ("python", "dispatch", "Transpose", "PJRT_Client_Compile")
    return {
        "lines": dict(lines.most_common(8)),
        "names": {k: names.get(k, 0) for k in keep} | {"top": dict(names.most_common(8))},
    }


def main() -> None:
    batch = np.random.default_rng(0).standard_normal((128, 224, 224, 3), np.float32)
    w = jnp.ones((1024, 1024))
    w, _ = loop(w, batch, 3)  # warm
    out = {"device": str(jax.devices()[0].device_kind)}
    for level in (1, 2, 3):
        options = ProfileOptions()
        options.host_tracer_level = level
        with tempfile.TemporaryDirectory() as folder:
            jax.profiler.start_trace(folder, profiler_options=options)
            began = time.perf_counter()
            w, _ = loop(w, batch, 5)
            ran = time.perf_counter() - began
            began = time.perf_counter()
            jax.profiler.stop_trace()
            stopped = time.perf_counter() - began
            (path,) = glob.glob(f"{folder}/plugins/profile/*/*.xplane.pb")
            out[f"level{level}"] = {"run_s": ran, "stop_s": stopped, **census(path)}
        print(level, json.dumps(out[f"level{level}"])[:600], flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
