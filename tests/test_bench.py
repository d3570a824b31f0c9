"""`tpuscope bench`: real torch_xla and JAX runs on the CPU, tiny shapes, few steps.

The real benches are session fixtures shared by several tests. The workers get
XLA_FLAGS for a quick, steady CPU backend: optimisation level 1 cuts each compile
of the tiny transformer from ~15 s to ~3 s, and single-threaded Eigen keeps a
fused graph from measuring the scheduler when CI runs two test files on two
cores. What the tests check — op-by-op dispatch against one fused graph per
step — is unchanged by either.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import run_tpuscope
from tpuscope.bench import stats
from tpuscope.bench.modes import precheck
from tpuscope.bench.script import ScriptError, parse_ref
from tpuscope.cli.main import main
from tpuscope.launch.env import tpu_present
from tpuscope.store import RunStore, load_run

FAST_XLA = {"XLA_FLAGS": "--xla_backend_optimization_level=1 --xla_cpu_multi_thread_eigen=false"}
TINY = ("--size", "tiny", "--steps", "6", "--warmup", "2", "--repeats", "1", "--quiet")
REQUIRED = {
    "mode",
    "backend",
    "model",
    "step_time_p50_ms",
    "step_time_p90_ms",
    "compiles",
    "run_id",
}


def bench_json(
    store: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[list[dict], str]:
    proc = run_tpuscope("bench", "--store", str(store), *args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), proc.stderr


def invoke(*args: str):
    """The CLI in this process: bad input is rejected before any worker starts, so it is quick."""
    return CliRunner().invoke(main, list(args))


def by_mode(rows: list[dict], backend: str) -> dict[str, dict]:
    return {r["mode"]: r for r in rows if r["backend"] == backend}


@pytest.fixture(scope="session")
def xla_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """The tiny transformer in all four torch_xla modes (plus torch_tpu rows, unavailable here)."""
    store = tmp_path_factory.mktemp("bench-xla")
    rows, _ = bench_json(
        store,
        "--model",
        "transformer",
        "--modes",
        "strict,fused,debug,compiled",
        "--backends",
        "torch_xla,torch_tpu",
        *TINY,
        env=FAST_XLA,
    )
    return store, rows


@pytest.fixture(scope="session")
def jax_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    store = tmp_path_factory.mktemp("bench-jax")
    rows, _ = bench_json(
        store, "--model", "mlp", "--modes", "strict,fused,debug", "--backends", "jax", *TINY
    )
    return store, rows


# -- torch_xla, real ------------------------------------------------------------------------
def test_json_lists_every_mode_with_the_required_fields(xla_bench):
    _, rows = xla_bench
    assert [(r["backend"], r["mode"]) for r in rows] == [
        (b, m) for b in ("torch_xla", "torch_tpu") for m in ("strict", "fused", "debug", "compiled")
    ]
    for row in by_mode(rows, "torch_xla").values():
        assert row.keys() >= REQUIRED
        assert row["status"] == "ok", row
        assert row["model"] == "transformer" and row["steps"] == 6 and row["repeats"] == 1
        assert 0 < row["step_time_min_ms"] <= row["step_time_p50_ms"] <= row["step_time_p90_ms"]
        assert row["host_cpu_p50_ms"] > 0
        assert row["samples_per_s"] > 0 and row["tokens_per_s"] == pytest.approx(
            16 * row["samples_per_s"]
        )
        assert row["first_step_ms"] > row["step_time_p50_ms"]  # step 0 compiles
        assert row["peak_host_mb"] > 100
        assert row["workload"]["head_dim"] == 64


def test_fused_and_strict_figures_are_consistent_on_the_transformer(xla_bench):
    """The harness's figures for Fused against Strict agree with each other.

    Which mode is faster is a measurement (benchmarks/eager_modes.py prints it, with its
    interval): on a loaded 2-core machine even CPU time per step and the fastest step flip
    between runs, so this test checks the arithmetic and the verdict's honesty, not the sign.
    """
    xla = by_mode(xla_bench[1], "torch_xla")
    strict, fused = xla["strict"], xla["fused"]
    for row in (strict, fused):
        assert row["host_cpu_p50_ms"] > 0 and 0 < row["step_time_min_ms"] <= row["step_time_p50_ms"]
    assert fused["speedup_vs_strict"] == pytest.approx(
        strict["step_time_p50_ms"] / fused["step_time_p50_ms"]
    )
    assert strict["verdict"] == "baseline" and strict["speedup_vs_strict"] == 1.0
    low, high = fused["speedup_range"]
    assert low <= fused["speedup_vs_strict"] <= high
    assert fused["significant"] == (low > 1 or high < 1)


def test_compiles_show_what_each_mode_costs(xla_bench):
    xla = by_mode(xla_bench[1], "torch_xla")
    # Strict compiles every distinct op once; fused compiles the whole step (twice: AdamW's
    # state appears at step 1); nothing compiles again after warm-up on static shapes.
    assert xla["strict"]["compiles"] > 50 > xla["fused"]["compiles"] >= 1
    assert xla["compiled"]["compiles"] >= 1
    for row in xla.values():
        assert row["compiles_after_warmup"] == 0
        assert row["compile_s"] > 0
    assert xla["debug"]["describe"]["blocking_waits_per_step"] > 100  # one wait per ATen op


def test_each_mode_is_a_run_in_the_store(xla_bench):
    store, rows = xla_bench
    groups = {r["bench_group"] for r in rows}
    assert len(groups) == 1
    for mode, row in by_mode(rows, "torch_xla").items():
        run = load_run(row["run_id"], store=store)
        meta = run.meta
        assert meta["name"] == f"bench-transformer-torch_xla-{mode}"
        assert (meta["bench_mode"], meta["bench_model"], meta["bench_backend"]) == (
            mode,
            "transformer",
            "torch_xla",
        )
        assert meta["bench_group"] in groups and meta["command"].startswith("tpuscope bench")
        assert meta["status"] == "finished" and meta["env_set"] == {"PJRT_DEVICE": "CPU"}
        # One step boundary per bench step. torch_xla.compile's leading sync can also
        # look like a step to the collector when late execution counters move.
        steps = len(run.steps)
        assert steps == 2 + 6 if mode != "compiled" else steps >= 2 + 6
        # The store also holds compiles made while building the model (eager mode compiles
        # the ops that initialise it), which the bench does not count as step compiles.
        assert len(run.compiles) >= row["compiles"] > 0
        assert (len(run.compiles) == row["compiles"]) == (mode in ("fused", "compiled"))
    assert len(RunStore(store).list_runs()) == 4


def test_torch_tpu_is_reported_unavailable_with_the_reason(xla_bench):
    tpu = by_mode(xla_bench[1], "torch_tpu")
    if importlib.util.find_spec("torch_tpu") and tpu_present():
        pytest.skip(
            "a TPU is present: torch_tpu runs for real (tests/tpu_real: test_bench_on_a_chip)"
        )
    for row in tpu.values():
        assert row["status"] == "unavailable" and row["run_id"] is None
        assert "torch_tpu is not installed" in row["reason"] or "no TPU" in row["reason"]


# -- JAX, real -----------------------------------------------------------------------------
def test_jax_modes(jax_bench):
    store, rows = jax_bench
    jax_rows = by_mode(rows, "jax")
    assert {m: r["status"] for m, r in jax_rows.items()} == {
        "strict": "ok",
        "fused": "ok",
        "debug": "ok",
    }
    assert jax_rows["fused"]["speedup_vs_strict"] > 1.5  # jit: one program instead of ~200 ops
    assert (
        jax_rows["strict"]["describe"]["ops_per_step"]
        == jax_rows["debug"]["describe"]["ops_per_step"]
        > 50
    )
    assert jax_rows["fused"]["compiles"] == 1 and jax_rows["strict"]["compiles"] > 10
    run = load_run(jax_rows["fused"]["run_id"], store=store)
    assert run.meta["bench_backend"] == "jax" and len(run.steps) >= 8


def test_models_without_a_jax_version_are_unavailable_not_failed():
    assert "no jax version of model 'transformer'" in precheck("jax", "strict", "transformer")
    assert precheck("jax", "compiled", "mlp").startswith("on JAX jax.jit is the fused mode")
    assert precheck("jax", "strict", "transformer", script="x.py:f") is None


# -- the user's own model --------------------------------------------------------------------
USER_SCRIPT = """
import torch

def make_step(device):
    model = torch.nn.Linear(32, 8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32).to(device), torch.randn(16, 8).to(device)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step, (x, y), {"samples": 16}
"""


def test_script_factory_runs_the_users_model(tmp_path):
    script = tmp_path / "my_model.py"
    script.write_text(USER_SCRIPT)
    rows, _ = bench_json(
        tmp_path / "store",
        "--script",
        f"{script}:make_step",
        "--modes",
        "fused",
        "--backends",
        "torch_xla",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--quiet",
        env=FAST_XLA,
    )
    (row,) = rows
    assert row["status"] == "ok" and row["model"] == "my_model" and row["compiles"] >= 1
    assert row["samples_per_s"] > 0 and row["tokens_per_s"] is None
    meta = load_run(row["run_id"], store=tmp_path / "store").meta
    assert meta["bench_script"] == f"{script.resolve()}:make_step"


def test_a_factory_that_fails_is_an_error_row_and_exit_1(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("def make_step(device):\n    raise ValueError('no data')\n")
    proc = run_tpuscope(
        "bench",
        "--store",
        str(tmp_path / "s"),
        "--script",
        f"{script}:make_step",
        "--backends",
        "jax",
        "--modes",
        "fused",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--quiet",
        "--json",
    )
    assert proc.returncode == 1
    (row,) = json.loads(proc.stdout)
    assert row["status"] == "error" and "ValueError: no data (broken.py:2)" in row["reason"]
    assert "tpuscope: jax fused failed: ValueError: no data" in proc.stderr


@pytest.mark.parametrize(
    "ref, message",
    [
        ("missing.py:make_step", "--script file not found: missing.py"),
        ("{script}:nope", "defines no top-level 'nope'"),
        ("{script}", "--script must look like file.py:factory"),
    ],
)
def test_bad_script_reference_exits_2_and_writes_nothing(tmp_path, monkeypatch, ref, message):
    script = tmp_path / "user.py"
    script.write_text("def make_step(device):\n    pass\n")
    store = tmp_path / "store"
    monkeypatch.chdir(tmp_path)
    result = invoke("bench", "--store", str(store), "--script", ref.format(script=script))
    assert result.exit_code == 2
    assert result.stderr.startswith("tpuscope: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (("--modes", "strict,turbo"), "unknown mode turbo"),
        (("--backends", "cuda"), "unknown backend cuda"),
        (("--model", "resnet"), "unknown model 'resnet'"),
        (("--size", "huge"), "unknown size 'huge'"),
    ],
)
def test_bad_options_exit_2(tmp_path, args, message):
    result = invoke("bench", "--store", str(tmp_path / "new"), *args)
    assert not (tmp_path / "new").exists()
    assert result.exit_code == 2 and message in result.stderr


def test_parse_ref_accepts_imported_and_assigned_factories(tmp_path):
    script = tmp_path / "m.py"
    script.write_text("from factories import build as make\nother = make\n")
    assert parse_ref(f"{script}:make") == (script.resolve(), "make")
    assert parse_ref(f"{script}:other")[1] == "other"
    with pytest.raises(ScriptError, match="not a Python name"):
        parse_ref(f"{script}:1x")


# -- statistics on hand-made numbers -------------------------------------------------------
def fake_result(mode: str, step_ms: list[float], repeat: int = 0, warmup: int = 1) -> dict:
    steps = [1000.0] * warmup + step_ms
    return {
        "backend": "torch_xla",
        "mode": mode,
        "model": "m",
        "size": "tiny",
        "steps": len(step_ms),
        "warmup": warmup,
        "repeat": repeat,
        "status": "ok",
        "run_id": f"{mode}-{repeat}",
        "peak_host_bytes": 2**30,
        "peak_device_bytes": None,
        "timeline": {
            "wall_ns": [ms * 1e6 for ms in steps],
            "compiles": [3] + [0] * len(step_ms),
            "compile_ns": [5e8] + [0] * len(step_ms),
            "samples": [8] * len(steps),
            "tokens": None,
        },
    }


def test_aggregate_uses_the_median_repeat_and_its_spread():
    row = stats.aggregate(
        [
            fake_result("fused", [10, 10, 10], 0),
            fake_result("fused", [12, 12, 12], 1),
            fake_result("fused", [11, 11, 11], 2),
        ]
    )
    assert row["step_time_p50_ms"] == 11 and row["run_id"] == "fused-2"
    assert row["noise_ms"] == [10, 12] and row["spread_pct"] == pytest.approx(100 * 2 / 11)
    assert (
        row["first_step_ms"] == 1000 and row["compiles"] == 3 and row["compiles_after_warmup"] == 0
    )
    assert row["compile_s"] == 0.5 and row["samples_per_s"] == pytest.approx(8 / 0.011)


def test_a_difference_inside_the_noise_is_not_called_real():
    strict = stats.aggregate(
        [fake_result("strict", [10] * 3, r) for r in range(2)]
        + [fake_result("strict", [14] * 3, 2)]
    )
    close = stats.aggregate([fake_result("fused", [9] * 3, 0), fake_result("fused", [12] * 3, 1)])
    far = stats.aggregate([fake_result("debug", [30] * 3, 0), fake_result("debug", [33] * 3, 1)])
    rows = {r["mode"]: r for r in stats.with_comparisons([strict, close, far])}
    assert rows["fused"]["verdict"] == "within noise" and rows["fused"]["significant"] is False
    assert rows["debug"]["verdict"] == "slower" and rows["debug"]["speedup_range"][1] < 1


def test_one_repeat_falls_back_to_the_step_iqr():
    row = stats.aggregate([fake_result("strict", [10, 11, 12, 13, 50])])
    assert row["noise_basis"].startswith("IQR") and row["noise_ms"] == [11, 13]


def test_unavailable_rows_have_the_reason_and_no_numbers():
    row = stats.aggregate(
        [
            {
                "backend": "torch_tpu",
                "mode": "fused",
                "model": "m",
                "size": "tiny",
                "steps": 3,
                "warmup": 1,
                "status": "unavailable",
                "reason": "no TPU",
            }
        ]
    )
    assert row["status"] == "unavailable" and row["reason"] == "no TPU"
    assert row["step_time_p50_ms"] is None and row["run_id"] is None
    assert stats.compare(row, None)["speedup_vs_strict"] is None


def test_an_unwritable_store_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = invoke("bench", "--store", str(blocker / "store"), "--model", "mlp")
    assert result.exit_code == 2 and "cannot write to the store" in result.stderr


def test_op_by_op_jax_matches_jit_and_counts_every_op():
    jax = pytest.importorskip("jax")
    from tpuscope.bench.jax_modes import OpByOp

    def f(params, x):
        loss = lambda p: (jax.nn.gelu(x @ p["w"]) ** 2).mean()  # noqa: E731 - a nested jaxpr (custom_jvp)
        return jax.value_and_grad(loss)(params)

    params = {"w": jax.numpy.ones((4, 3)) / 3}
    x = jax.numpy.arange(8.0).reshape(2, 4)
    eager = OpByOp(f, block=True)
    (value, grads), (want_value, want_grads) = eager(params, x), jax.jit(f)(params, x)
    assert float(value) == pytest.approx(float(want_value), rel=1e-5)
    assert jax.numpy.allclose(grads["w"], want_grads["w"], rtol=1e-5)
    ops = eager.ops
    eager(params, x)
    assert ops > 5 and eager.ops == 2 * ops  # traced once, every equation dispatched each call
