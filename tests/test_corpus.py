"""tpuscope on the corpus of real programs (tests/corpus/): exact findings against measured ground truth.

Every corpus program is a small driver in the idiom of code users really run (pytorch/xla's
examples and tests, Flax/JAX examples, Hugging Face models; tests/corpus/README.md). For each
one, once per session:
- its ground truth is measured without tpuscope (`truth.measure`: a plain `python` process
  whose hook records torch_xla's counters or JAX's compile log at every iteration);
- it runs once under `tpuscope run --store <tmp> --quiet python tests/corpus/<program>`.
Set CORPUS_STORE=DIR to keep the runs (`tpuscope show --store DIR/corpus-* RUN`).
The tests assert (a) the truth itself (what the program is in the corpus for), (b) the same
stdout and exit status with and without tpuscope, (c) tpuscope's step count equals the
program's iteration count, and (d) the exact findings, as the set of (rule, file:line), that
the truth implies a correct tool reports, the lines found by `# corpus: <name>` markers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_tpuscope
from tests.corpus.truth import CORPUS, Truth, where
from tests.corpus_suite import (  # noqa: F401 (the session fixtures and the tests every program gets)
    CARDS,
    FIRST_HALF,
    CorpusRun,
    _short,
    corpus_run,
    corpus_store,
    parametrize_programs,
    test_exact_findings,
    test_jax_findings_say_nothing_of_torch_xla,
    test_live_alerts_name_the_reports_recompiles_and_fallbacks,
    test_same_output_and_exit_with_tpuscope,
    test_steps_equal_iterations,
    truth,
)

pytestmark = pytest.mark.slow

PROGRAMS = FIRST_HALF


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_programs(metafunc, PROGRAMS)


# (a) the ground truth, measured without tpuscope ---------------------------------------------


def test_truth_mnist_compiles_in_epoch_1_only(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_mnist.py")
    phases = ("train:e{}", "train-end:e{}", "eval:e{}", "eval-end:e{}")
    epoch1 = t.total("UncachedCompile", "setup") + sum(
        t.total("UncachedCompile", p.format(1)) for p in phases
    )
    epoch2 = sum(t.total("UncachedCompile", p.format(2)) for p in phases)
    # epoch 1: broadcast_master_param, train iterations 0 and 1, eval iterations 0 and 1
    assert (epoch1, epoch2) == (5, 0)
    assert t.work("setup")["UncachedCompile"] == 1
    assert t.per_phase("UncachedCompile", "eval:e1") == [1, 1]
    # the first two train iterations compile (step 1 creates SGD's momentum buffers), then cached
    assert t.per_phase("UncachedCompile", "train:e1") == [1, 1, 0, 0, 0, 0]
    assert t.per_phase("CachedCompile", "train:e2") == [1, 1, 1, 1, 1, 1]
    assert t.fallback_ops == []
    assert t.extra["iterations"] == {"train": 12, "eval": 4}


def test_truth_compile_loader_two_compiles_in_twelve_iterations(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_xla_compile_loader.py")
    assert t.per_phase("UncachedCompile", "train:") == [1, 1] + [0] * 10
    assert t.per_phase("CachedCompile", "train:")[2:] == [1] * 10
    assert t.total("MarkStep", "train:") > 12  # torch_xla.compile and the loader both mark steps
    assert t.fallback_ops == []


def test_truth_eager_runs_op_by_op(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_eager.py")
    steady = t.per_phase("ExecuteComputation", "train:")[2:]
    assert len(steady) == 6 and all(n == steady[0] for n in steady) and steady[0] >= 30
    # every execution is one EagerOpExecuteTime sample; samples land when the async execution
    # ends, so they are split between neighbouring marks, but none is lost
    samples = t.per_phase("metric:EagerOpExecuteTime", "train:")[2:]
    assert (
        abs(sum(samples) - sum(steady)) <= steady[0]
    )  # at most one step's samples still in flight
    assert t.fallback_ops == []


def test_truth_generate_recompiles_every_request(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_generate.py")
    uncached = t.per_phase("UncachedCompile", "request:")
    assert len(uncached) == 3 and all(n > 0 for n in uncached)  # every request compiles new graphs
    assert t.per_phase("MarkStep", "request:") == [0, 0, 0]  # generate() never marks a step
    assert t.fallback_ops == ["aten::isin.Tensor_Tensor"]
    assert all(n > 0 for n in t.per_phase("aten::isin.Tensor_Tensor", "request:"))
    assert all(n > 0 for n in t.per_phase("aten::_local_scalar_dense", "request:"))


def test_truth_hf_train_is_static(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_train.py")
    assert t.per_phase("UncachedCompile", "train:") == [1, 1] + [0] * 8
    assert t.total("aten::_local_scalar_dense", "train:") == 2  # the two loss.item() logs
    assert t.fallback_ops == []


def test_truth_encoder_dots_have_head_dim_64(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_encoder_head64.py")
    assert t.extra["head_dim"] == 64
    shapes = set(t.dots)
    assert (
        "f32[12,64,64]",
        "f32[12,64,64]",
        "f32[12,64,64]",
    ) in shapes  # q @ k^T, attn @ v per head
    assert ("f32[256,192]", "f32[192,576]", "f32[256,576]") in shapes  # fused qkv projection
    assert t.per_phase("UncachedCompile", "infer:")[1:] == [0] * 5
    assert t.fallback_ops == []


def test_truth_hf_mask_reads_values_inside_every_forward(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_train_mask.py")
    reads = t.per_phase("aten::_local_scalar_dense", "train:")
    # 2 reads inside model() every step, +1 for the loss.item() logged at steps 0 and 4
    assert reads == [3, 2, 2, 2, 3, 2, 2, 2]
    assert t.per_phase("UncachedCompile", "train:")[2:] == [0] * 6
    assert (
        t.per_phase("CachedCompile", "train:")[2:] == [3] * 6
    )  # the reads cut each step in 3 graphs
    assert t.fallback_ops == []


def test_truth_short_trailing(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_short_trailing.py")
    assert t.per_phase("UncachedCompile", "train:") == [1, 1, 0]
    assert t.work("after-loop").get("UncachedCompile", 0) == 1  # the final eval: a new graph
    assert t.fallback_ops == []


def test_truth_flax_train_step_compiles_once(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_jax_flax_mnist.py")
    assert [c["label"] for c in t.jax_compiles("train_step")] == ["train:e1:i0"]
    labels = {c["label"] for c in t.data["jax_compiles"]}
    assert {"eval:e1", "after-loop"} <= labels  # eager primitives of accuracy() / model(X)
    assert not any(c["label"].startswith("eval:e2") for c in t.data["jax_compiles"])


def test_truth_shortbatch_retraces_once(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_jax_shortbatch.py")
    compiles = t.jax_compiles("train_step")
    assert [c["label"] for c in compiles] == ["train:i0", "train:i6"]
    assert "float32[32,64]" in compiles[0]["shapes"] and "float32[8,64]" in compiles[1]["shapes"]
    assert t.extra["iterations"] == 14


def test_truth_varlen_compiles_per_new_length(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_varlen.py")
    assert t.extra["lengths"] == [16, 16, 16, 24, 16, 32, 24, 16]
    assert t.per_phase("UncachedCompile", "train:") == [1, 1, 0, 1, 0, 1, 0, 0]
    assert t.fallback_ops == []


def test_truth_embedding_bag_falls_back(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_fallback.py")
    assert t.fallback_ops == ["aten::_embedding_bag", "aten::_embedding_bag_backward"]
    assert t.per_phase("aten::_embedding_bag", "train:") == [1] * 8
    assert t.per_phase("aten::_embedding_bag_backward", "train:") == [1] * 8
    assert t.per_phase("UncachedCompile", "train:")[1:] == [0] * 7


def test_truth_quickstart_nosync_compiles_at_every_read(truth: Callable[[str], Truth]) -> None:
    """No sync: the loop's graphs run only at its reads, each a new graph (none ever cached)."""
    t = truth("corpus_xla_quickstart_nosync.py")
    train = [1, 0, 0, 0, 0]
    assert t.per_phase("UncachedCompile", "train:") == train * 2
    assert t.per_phase("UncachedCompile", "test:") == [1, 1]
    assert t.per_phase("CachedCompile", "") == [0] * 13  # setup + 10 iterations + 2 tests
    assert t.per_phase("MarkStep", "") == [0] * 13
    assert t.fallback_ops == []


def test_quickstart_nosync_cards_say_the_loop_never_syncs(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    """The cause is the evidence (the steps end at optimizer steps: no sync), not a guess."""
    run = corpus_run("corpus_xla_quickstart_nosync.py")
    cards = [f for f in run.findings if f["rule"] == "recompile"]
    assert all("never calls torch_xla.sync()" in c["fix"] for c in cards), cards
    assert sorted(c["step_runs"] for c in cards) == sorted([[[5, 5]], [[9, 9]]])


def test_shortbatch_finding_names_batch_x(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_jax_shortbatch.py")
    recompiles = [f for f in run.findings if f["rule"] == "recompile"]
    assert len(recompiles) == 1
    text = " ".join(str(recompiles[0].get(k) or "") for k in ("title", "detail"))
    assert "batch['x']" in text and "train_step" in text


def test_fallback_findings_name_the_ops(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_xla_fallback.py")
    by_line = {_short(f["location"]): f for f in run.findings if f["rule"] == "cpu_fallback"}
    forward = by_line.get(where("corpus_xla_fallback.py", "embedding-call"))
    backward = by_line.get(where("corpus_xla_fallback.py", "backward"))
    assert forward and "aten::_embedding_bag" in forward["title"] + forward["detail"]
    assert backward and "_embedding_bag_backward" in backward["title"] + backward["detail"]


def test_generate_value_reads_are_host_syncs_not_fallbacks(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    run = corpus_run("corpus_hf_generate.py")
    fallbacks = [f for f in run.findings if f["rule"] == "cpu_fallback"]
    assert fallbacks and all("isin" in f["title"] + f["detail"] for f in fallbacks)
    assert not any("_local_scalar_dense" in f["title"] for f in fallbacks)
    assert any(f["rule"] == "host_sync" for f in run.findings)


def test_encoder_underuse_names_head_dim_at_the_users_line(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    run = corpus_run("corpus_xla_encoder_head64.py")
    underuse = [f for f in run.findings if f["rule"] == "tensorcore_underuse"]
    assert underuse and any("head_dim" in f["title"] + f["detail"] for f in underuse)
    for f in underuse:
        assert _short(f["location"]) == where("corpus_xla_encoder_head64.py", "model-call")
        assert "linear.py" not in (f.get("location") or "") and "functional.py" not in (
            f.get("location") or ""
        )


def test_varlen_recompile_carries_its_shape_churn(corpus_run: Callable[[str], CorpusRun]) -> None:
    """One root cause, one card: the varying sequence length and its compiles are facets."""
    [card] = [f for f in corpus_run("corpus_hf_varlen.py").findings if f["rule"] == "recompile"]
    churn = card["evidence"]["shape_churn"]
    assert churn["dim"] == 1 and churn["values"] == [16, 24, 32]  # truth: lengths 16, 24, 32
    assert card["step_runs"] == [[3, 3], [5, 5]] and "pad" in card["fix"]


# --- issue 26, helper "shapes": per-graph shapes in the default mode ------------------------------
# corpus_hf_varlen.py's card above runs in the default mode; its recompile card's shape churn
# (test_varlen_recompile_carries_its_shape_churn) comes from the HLO dump tpuscope now adds by
# default. --deep adds the HLO with each op's line, which the tensorcore rule needs: that finding
# keeps its own run here.


@pytest.fixture(scope="session")
def varlen_deep(corpus_store: Path) -> CorpusRun:
    proc = run_tpuscope(
        "run",
        "--store",
        str(corpus_store),
        "--name",
        "deep-varlen",
        "--quiet",
        "--deep",
        "python",
        str(CORPUS / "corpus_hf_varlen.py"),
        cwd=corpus_store.parent,
    )
    [run_dir] = [p for p in corpus_store.iterdir() if p.name.startswith("deep-varlen-")]
    shown = run_tpuscope("show", "--store", str(corpus_store), run_dir.name, "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    return CorpusRun(run_dir, proc, json.loads(shown.stdout))


def test_varlen_deep_adds_tensorcore_underuse(varlen_deep: CorpusRun) -> None:
    assert varlen_deep.proc.returncode == 0, varlen_deep.proc.stderr[-3000:]
    assert varlen_deep.report["summary"]["steps"] == 8
    assert varlen_deep.pairs() == {
        ("recompile", where("corpus_hf_varlen.py", "sync")),
        ("tensorcore_underuse", where("corpus_hf_varlen.py", "model-call")),
    }


def test_varlen_default_mode_compiles_carry_shapes_and_leave_no_dump(
    corpus_run: Callable[[str], CorpusRun], truth: Callable[[str], Truth]
) -> None:
    """Every compile of the train step has its graph's shapes (the token batch s64[4,length] among
    them, truth: lengths 16, 24, 32 compile); tpuscope's dump folder is gone with the run."""
    from tpuscope.store import Run

    run = corpus_run("corpus_hf_varlen.py")
    compiles = Run(run.run_dir).compiles
    assert all(shapes is not None and len(shapes) for shapes in compiles["input_shapes"])
    tokens = [[s for s in shapes if s.startswith("s64[4,")] for shapes in compiles["input_shapes"]]
    lengths = sorted({int(s[len("s64[4,") : -1]) for found in tokens for s in found})
    assert lengths == sorted(set(truth("corpus_hf_varlen.py").extra["lengths"]))
    assert not list((run.run_dir / "debug").glob("hlo-*"))
