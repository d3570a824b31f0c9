"""Rule compile_time on real JAX runs (CPU), in a real store: the same program four times,
twice with the persistent cache off, then twice with it on (JAX_COMPILATION_CACHE_DIR, minimums
0 so the CPU's short compiles are written). The cache's state is what JAX said (its events, its
config), the card counts the earlier runs that compiled the same graphs, and a run whose cache
hit is never told to turn it on. `tpuscope diff` and the Compare page put the runs' compile
seconds and caches side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, run_tpuscope
from tpuscope.detect.run_analysis import RunReport, current
from tpuscope.schema import Finding
from tpuscope.store import Run, RunStore

PROGRAM = str(EXAMPLES / "jax_mlp.py")
# 64 hidden layers: the step compiles for 1.8 s of CPU here (measured with process_time around
# .lower().compile()), the 20-odd eager ops of the init ~0.8 s more, so the run compiles over
# compile_time's 1 s on a machine twice as fast
ARGS = ("--steps", "4", "--dim", "16", "--hidden", "32", "--layers", "64", "--batch", "8")
TURN_ON = 'jax.config.update("jax_compilation_cache_dir"'
RUNS = ("off-1", "off-2", "on-1", "on-2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """label -> (Run, its analysis); 'store' and 'cache' the folders."""
    root = tmp_path_factory.mktemp("compile-time")
    store, cache = root / "store", root / "cache"
    out: dict[str, Any] = {"store": store, "cache": cache}
    for label in RUNS:
        env = {"JAX_COMPILATION_CACHE_DIR": ""}  # off, whatever the caller's environment says
        if label.startswith("on"):
            env = {
                "JAX_COMPILATION_CACHE_DIR": str(cache),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            }
        proc = run_tpuscope(
            "run", "--store", str(store), "--name", "mlp", "--quiet", "python", PROGRAM, *ARGS,
            env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        run = Run(store / RunStore(store).list_runs()[0]["run_id"])  # newest first
        out[label] = (run, current(run))
    return out


def card(report: RunReport) -> Finding | None:
    found = [f for f in report.findings if f.rule == "compile_time"]
    assert len(found) <= 1
    return found[0] if found else None


def test_the_cache_is_read_from_the_runtime(runs: dict[str, Any]) -> None:
    for label in RUNS:
        run, report = runs[label]
        settings = run.meta["processes"][0]["compile_cache"]
        status = run.compiles["persistent_cache"]
        first = int(run.compiles["graph_hash"].nunique())
        cache = report.summary.compile_cache
        if label.startswith("off"):
            assert settings["on"] is False and status.isna().all()
            assert cache is not None and cache["on"] is False
            continue
        assert settings["on"] is True and settings["dir"] == str(runs["cache"])
        assert settings["min_compile_time_s"] == 0
        # the first run with the cache compiles and writes every graph, the second loads them
        # all (JAX's cache_misses / cache_hits events, one per compile)
        expected = "miss" if label == "on-1" else "hit"
        assert set(status) == {expected}, status.tolist()
        assert cache["hits" if expected == "hit" else "misses"] == first
        assert run.compiles["backend_compile_ns"].notna().all()
    # a load is cheaper than the compile it replaces
    loaded = runs["on-2"][0].compiles["backend_compile_ns"].sum()
    compiled = runs["on-1"][0].compiles["backend_compile_ns"].sum()
    assert loaded < compiled


def test_the_second_run_says_it_compiled_in_each_of_the_last_two_runs(runs: dict[str, Any]) -> None:
    found = card(runs["off-2"][1])
    assert found is not None
    assert "compiled in each of your last 2 runs" in found.title
    assert "compiled in each of your last 2 runs" in found.detail
    evidence = found.evidence
    history = evidence["history"]
    assert history["runs"] == 2 and history["run_ids"] == [runs["off-1"][0].run_id]
    assert history["saved_s"] > 0 and len(history["seconds_each"]) == 2
    # the split at the user's lines: the step's own compile, the init's ops outside jit
    kinds = {g["kind"]: g for g in evidence["groups"]}
    assert {"step", "eager"} <= set(kinds)
    assert kinds["step"]["lines"][0]["functions"] == ["train_step"]
    assert all("jax_mlp.py:" in line["location"] for line in kinds["eager"]["lines"])
    # the cache was off: turn it on, jit the init, compile the step ahead of the loop
    assert TURN_ON in found.fix and "jax.jit(init)" in found.fix
    assert "nnx.jit(lambda: Model(" in found.fix  # Flax NNX builds its model eagerly
    assert "the jitted `train_step` (called at jax_mlp.py:" in found.fix
    assert ".lower(*example_args).compile()" in found.fix
    assert "off (jax_compilation_cache_dir not set)" in found.detail


def test_a_run_with_the_cache_on_is_not_told_to_turn_it_on(runs: dict[str, Any]) -> None:
    filling = card(runs["on-1"][1])  # compiled (and wrote) the same graphs a third time
    assert filling is not None and "compiled in each of your last 3 runs" in filling.title
    assert TURN_ON not in filling.fix and "Nothing to turn on" in filling.fix
    assert "written to it" in filling.detail
    loaded = card(runs["on-2"][1])  # everything came from the cache
    assert loaded is None or (TURN_ON not in loaded.fix and "loaded from it" in loaded.detail)
    if loaded is not None:
        assert loaded.evidence["history"] is None  # it compiled nothing again


def test_diff_and_compare_put_compile_seconds_side_by_side(runs: dict[str, Any]) -> None:
    store = runs["store"]
    a, b = runs["off-1"][0], runs["on-2"][0]
    proc = run_tpuscope("diff", "--store", str(store), a.run_id, b.run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    assert diff["compile_s"]["a"] == pytest.approx(runs["off-1"][1].summary.compile_s)
    assert diff["compile_s"]["b"] == pytest.approx(runs["on-2"][1].summary.compile_s)
    assert diff["compile_cache"]["a"]["on"] is False and diff["compile_cache"]["b"]["hits"] > 0
    text = run_tpuscope("diff", "--store", str(store), a.run_id, b.run_id, "--markdown").stdout
    hits = diff["compile_cache"]["b"]["hits"]
    assert f"| persistent compile cache | off | on: {hits} loaded |" in text
    assert "| compile time |" in text and "| run wall time |" in text

    from tpuscope.dashboards.data import StoreData
    from tpuscope.dashboards.pages.compare import layout

    page = str(layout(StoreData(store), a.run_id, b.run_id).to_plotly_json())
    assert "persistent compile cache" in page and f"on: {hits} loaded" in page
    assert "compile time / run wall time" in page


def test_the_benchmark_and_its_program_need_jax_only() -> None:
    """benchmarks/compile_cache.py runs on a bare TPU machine: JAX and tpuscope only."""
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "compile_cache.py"
    for path in (bench, Path(PROGRAM)):
        imports = [
            line.split()[1]
            for line in path.read_text().splitlines()
            if line.startswith(("import ", "from "))
        ]
        assert not {i.split(".")[0] for i in imports} & {"torch", "torch_xla", "flax", "optax"}


XLA_PROGRAM = """
import torch, torch_xla
x = torch.randn(8, 8, device=torch_xla.device())
for _ in range(3):
    x = torch.tanh(x @ x)
    torch_xla.sync()
print(float(x.sum()))
"""


def test_torch_xla_cache_folder_and_counters_are_read(tmp_path: Path) -> None:
    """torch_xla's cache as the process had it (XLA_PERSISTENT_CACHE_PATH, which
    torch_xla.runtime.initialize_cache sets) and its own counters: the second run finds the
    first run's entries (on torch_xla 2.9's CPU backend it cannot load them:
    PersistentCacheDeserializeFailure, the same without tpuscope)."""
    store, cache = tmp_path / "store", tmp_path / "xla-cache"
    summaries = []
    for _ in range(2):
        proc = run_tpuscope(
            "run", "--store", str(store), "--name", "xla", "--quiet", "python", "-c", XLA_PROGRAM,
            env={"XLA_PERSISTENT_CACHE_PATH": str(cache), "PJRT_DEVICE": "CPU"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        run = Run(store / RunStore(store).list_runs()[0]["run_id"])
        settings = run.meta["processes"][0]["compile_cache"]
        assert settings == {
            "backend": "torch_xla", "on": True, "dir": str(cache), "read_only": False,
        }  # fmt: skip
        summaries.append(current(run).summary.compile_cache)
    assert summaries[0]["misses"] > 0 and not summaries[0].get("hits")
    second = summaries[1]
    assert second.get("hits", 0) + second.get("load_failures", 0) > 0, second


def test_the_ahead_of_time_advice_names_the_costliest_step_function() -> None:
    """flax's lm1b loop also calls clu's tiny jitted `_squareit` (a timing barrier): the advice
    names the step's costliest compile (`train_step`, called at train.py:543), not the first
    name in alphabetical order."""
    from tpuscope.detect.compile_advice import fix_text

    lines = [
        {
            "location": "/w/train.py:543",
            "compiles": 1,
            "seconds": 12.9,
            "functions": ["train_step"],
        },
        {"location": "/w/train.py:555", "compiles": 1, "seconds": 0.1, "functions": ["_squareit"]},
    ]
    parts = [{"kind": "step", "compiles": 2, "seconds": 13.0, "lines": lines}]
    fix = fix_text(parts, {"on": False}, "jax", None, step_recompiled=False)
    assert "the jitted `train_step` (called at train.py:543) ahead of the loop" in fix
    assert "_squareit" not in fix


def test_a_line_s_functions_are_named_costliest_first() -> None:
    """One line that compiled a tiny barrier jit and the step: the step first, so the advice,
    which names a line's first function, names the step; a step with no user's line gets no
    'called at'."""
    import pandas as pd

    from tpuscope.detect.compile_advice import fix_text
    from tpuscope.detect.compile_time import _lines

    rows = pd.DataFrame(
        {
            "location": ["/w/train.py:9", "/w/train.py:9"],
            "duration_ns": [7e7, 7.3e10],
            "function": ["_squareit", "train_step"],
        }
    )
    assert _lines(rows)[0]["functions"] == ["train_step", "_squareit"]
    lines = [{"location": "", "compiles": 1, "seconds": 73.0, "functions": ["train_step"]}]
    parts = [{"kind": "step", "compiles": 1, "seconds": 73.0, "lines": lines}]
    fix = fix_text(parts, {"on": False}, "jax", None, step_recompiled=False)
    assert "compile the jitted `train_step` ahead of the loop" in fix and "called at" not in fix
