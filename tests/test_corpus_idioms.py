"""The corpus's second half: the idioms of session 9 (issue 26), each a real program nobody here
wrote (loops a framework owns, torch.compile, SPMD, Keras, pmap, sharded jit, fallbacks outside
`aten::`, generate() with a static cache, mesh_reduce, buckets), with its measured truth and exact
findings. The machinery is tests/corpus_suite.py; the first half and the method: tests/test_corpus.py.
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
    SECOND_HALF,
    CorpusRun,
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

PROGRAMS = SECOND_HALF


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_programs(metafunc, PROGRAMS)


# --- issue 26 truth (helper xsteps): loops a framework owns ---


def test_truth_hf_trainer_compiles_in_its_first_logging_pass_only(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_hf_trainer.py")
    assert t.extra["iterations"] == 12 and len(t.per_phase("UncachedCompile", "train:")) == 12
    # iteration 0 (the step and the mask read), 1 (AdamW's state), 3 (the first logging pass's
    # reductions, each a new graph); the logging passes at 7 and 11 compile nothing
    assert t.per_phase("UncachedCompile", "train:") == [2, 1, 0, 4] + [0] * 8
    reads = t.per_phase("aten::_local_scalar_dense", "train:")
    assert [reads[i] for i in range(12) if i % 4 != 3] == [1] * 9  # the read inside every forward
    assert all(reads[i] >= 5 for i in (3, 7, 11))  # + the logging pass's loss and grad norm reads
    assert [n > 1 for n in t.per_phase("MarkStep", "train:")] == [i % 4 == 3 for i in range(12)]
    assert t.fallback_ops == []


def test_truth_dynamo_calls_run_cached_graphs_without_a_step_marker(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_xla_dynamo_train.py")
    assert (
        t.per_phase("UncachedCompile", "train:") == [4, 1] + [0] * 10
    )  # traced in call 1, inputs' graph in 2
    assert (
        t.per_phase("CachedCompile", "train:") == [0, 0] + [1] * 10
    )  # the inputs' lazy graph, every call
    assert t.per_phase("MarkStep", "train:") == [0] * 12  # no step boundary in the loop
    # 4 executions a call (3 cached graphs + the inputs' graph) + the final read's 1; samples of
    # an asynchronous execution land at the next mark, so only the sum is exact, but for the
    # final read's: nothing marks after it, and torch_xla records it after handing the value
    # back, so the harness's last read of the metrics misses it now and then (48 seen, twice)
    executed = t.total("metric:ExecuteTime", "train:") + t.total("metric:ExecuteTime", "after-loop")
    assert executed in (12 * 4, 12 * 4 + 1)
    assert t.work("after-loop")["UncachedCompile"] == 1
    assert t.extra["dynamo_stats"]["unique_graphs"] >= 1
    assert t.fallback_ops == []


def test_truth_spmd_step_compiles_twice_over_four_devices(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_spmd_dp.py")
    assert t.extra["devices"] == 4
    assert (
        t.per_phase("UncachedCompile", "train:") == [1, 1] + [0] * 10
    )  # SGD momentum at iteration 1
    assert t.per_phase("CachedCompile", "train:")[2:] == [1] * 10
    assert (
        t.total("aten::_local_scalar_dense", "train:") == 3
    )  # the closures' loss.item(), every 4 steps
    assert t.fallback_ops == []


# -- issue 26 "Every CPU fallback" (helper fallback): truth of the programs outside `aten::` ----
def test_truth_tv_detection_fallbacks_in_three_namespaces(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_tv_detect_postprocess.py")
    assert t.fallback_ops == ["aten::nonzero", "torchvision::nms", "torchvision::roi_align"]
    assert (
        t.per_phase("aten::nonzero", "infer:") == [2] * 8
    )  # torch.where(...)[0], remove_small_boxes
    assert t.per_phase("torchvision::nms", "infer:") == [1] * 8  # batched_nms
    assert t.per_phase("torchvision::roi_align", "infer:") == [1] * 8
    # every fallback call copies its inputs to the host once (4), then 3 `.cpu()` reads
    assert t.per_phase("xla::_to_cpu", "infer:") == [4] * 8
    assert t.per_phase("metric:TransferFromDeviceTime", "infer:") == [7] * 8
    assert (
        t.total("aten::_local_scalar_dense", "infer:") == 0
    )  # no value read: fallbacks and copies
    assert len(set(t.extra["kept"])) > 1  # the kept boxes depend on the data ...
    assert all(
        n > 0 for n in t.per_phase("UncachedCompile", "infer:")[1:]
    )  # ... and every batch compiles


def test_truth_tv_resnet_trains_without_fallbacks(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_tv_resnet_train.py")
    assert t.fallback_ops == []
    assert t.per_phase("UncachedCompile", "train:") == [
        1,
        1,
        0,
        0,
        0,
        0,
    ]  # momentum buffers at step 1
    assert t.total("aten::_local_scalar_dense", "train:") == 2  # the two logged losses


def test_truth_custom_op_fallback_every_step(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_fallback_custom_op.py")
    assert t.fallback_ops == ["corpus_ops::numpy_tanh"]
    assert t.per_phase("corpus_ops::numpy_tanh", "train:") == [1] * 6
    assert t.per_phase("UncachedCompile", "train:")[1:] == [0] * 5
    assert (
        t.total("aten::_local_scalar_dense", "train:") == 0
    )  # the one `.item()` is after the loop
    assert t.work("after-loop")["aten::_local_scalar_dense"] == 1


def test_fallback_cards_name_ops_outside_aten(corpus_run: Callable[[str], CorpusRun]) -> None:
    """Each card names its op and its fix; the value reads the fallbacks make are not host syncs."""
    run = corpus_run("corpus_tv_detect_postprocess.py")
    ops = {f["evidence"]["op"]: f for f in run.findings if f["rule"] == "cpu_fallback"}
    assert set(ops) == {"aten::nonzero", "torchvision::nms", "torchvision::roi_align"}
    assert "XLA_EXPERIMENTAL=nms" in ops["torchvision::nms"]["fix"]
    [sync] = [f for f in run.findings if f["rule"] == "host_sync"]
    assert [s["location"] for s in sync["evidence"]["sites"]] == [
        sync["location"]
    ]  # only the `.cpu()` line
    assert {o["op"] for o in run.report["summary"]["fallback_ops"]} == set(ops)
    [custom] = [
        f
        for f in corpus_run("corpus_xla_fallback_custom_op.py").findings
        if f["rule"] == "cpu_fallback"
    ]
    assert (
        custom["evidence"]["op"] == "corpus_ops::numpy_tanh"
        and 'register_kernel("xla")' in custom["fix"]
    )


# -- issue 26, JAX beyond jit (helper "jax"): truth and what the cards say -----------------------


def test_truth_keras_fit_compiles_train_step_for_the_short_batch(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_jax_keras_fit.py")
    compiles = t.jax_compiles("train_step")
    assert [c["label"] for c in compiles] == [
        "train:i0",
        "train:i5",
    ]  # epoch 2's short batch: cached
    assert (
        "float32[32,28,28,1]" in compiles[0]["shapes"]
        and "float32[8,28,28,1]" in compiles[1]["shapes"]
    )
    assert [c["label"] for c in t.jax_compiles("test_step")] == ["after-fit"]
    assert t.extra["iterations"] == 12


def test_truth_pmap_compiles_train_step_twice_and_eval_for_the_short_batch(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_jax_pmap.py")
    compiles = t.jax_compiles(
        "_fun"
    )  # jax 0.10's pmap: jit(shard_map(_fun)) of the user's function
    assert [c["label"] for c in compiles] == ["train:i0", "train:i1", "eval:b0", "eval:b2"]
    assert (
        compiles[0]["shapes"] == compiles[1]["shapes"]
    )  # the same program compiled again (sharding)
    assert "float32[2,8,64]" in compiles[2]["shapes"] and "float32[2,4,64]" in compiles[3]["shapes"]
    assert t.stdout.startswith("devices 2")


def test_truth_sharded_update_compiles_again_for_the_new_layout(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_jax_sharding.py")
    compiles = t.jax_compiles("update")
    assert [c["label"] for c in compiles] == [
        "train:data-parallel:i0",
        "train:data+model-parallel:i6",
    ]
    assert (
        "@model" not in compiles[0]["shapes"] and "float32[64,128@model]" in compiles[1]["shapes"]
    )


def test_keras_fit_steps_are_keras_train_step_calls(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_jax_keras_fit.py")
    [card] = [f for f in run.findings if f["rule"] == "recompile"]
    assert "train_step" in card["title"] and card["step_runs"] == [[5, 5]]
    # JAX does not explain Keras's jit: tpuscope names the argument from the call it tracked
    assert (
        "data[0]" in card["title"]
        and "data[0]: f32[32,28,28,1] -> f32[8,28,28,1]" in card["detail"]
    )
    assert "short last batch" in card["fix"]
    import tpuscope

    [proc] = tpuscope.load_run(run.run_dir).meta["processes"]
    assert (
        proc["jax_step_source"].startswith("calls of jitted train_step (")
        and "keras" in proc["jax_step_source"]
    )


def test_an_unjitted_keras_fit_has_a_step_a_batch(corpus_run: Callable[[str], CorpusRun]) -> None:
    """Keras ran the augmenting model without jit (no jitted step recurs): its batch callbacks
    bracket the steps (collect/jax/keras_batches.py), one a batch, so op_by_op counts a batch's
    ops (before: "steps: 1", keras-io's ViT on a v5e 34,590 ops "per step" in 10 batches)."""
    run = corpus_run("corpus_jax_keras_augment.py")
    import tpuscope

    loaded = tpuscope.load_run(run.run_dir)
    [proc] = loaded.meta["processes"]
    assert proc["jax_step_source"] == "Keras fit's batches (its model run without jit)"
    assert list(loaded.steps.sort_values("step")["boundary"]) == ["keras:train_batch"] * 10
    [card] = [f for f in run.findings if f["rule"] == "op_by_op"]
    assert 100 < card["evidence"]["dispatches_per_step"] < 1000, card["evidence"]


def test_pmap_compiles_are_the_users_functions_with_the_sharding_named(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    import tpuscope

    run = corpus_run("corpus_jax_pmap.py")
    compiles = tpuscope.load_run(run.run_dir).compiles
    pmapped = compiles[compiles["function"].isin(["train_step", "eval_step"])]
    assert list(pmapped["function"]) == ["train_step", "train_step", "eval_step", "eval_step"]
    assert not pmapped["eager"].any()
    train = pmapped[pmapped["function"] == "train_step"]
    assert train["graph_hash"].nunique() == 1  # one program, compiled twice
    cards = {f["location"].rsplit(":", 1)[-1]: f for f in run.findings if f["rule"] == "recompile"}
    train_card = cards[where("corpus_jax_pmap.py", "step-call").rsplit(":", 1)[-1]]
    assert "sharding" in train_card["fix"] and "_device_put_sharded" in train_card["detail"]
    assert "dtype (cast" not in train_card["fix"] and "pad" not in train_card["fix"]
    eval_card = cards[where("corpus_jax_pmap.py", "eval-call").rsplit(":", 1)[-1]]
    assert "batch['x']" in eval_card["title"] and "pad" in eval_card["fix"]
    assert run.report["summary"]["value_reads"] == 4  # get_metrics + float, after training and eval


def test_sharding_retrace_advice_names_sharding_not_dtype(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    run = corpus_run("corpus_jax_sharding.py")
    [card] = [f for f in run.findings if f["rule"] == "recompile"]
    assert card["step_runs"] == [[6, 6]]
    assert (
        "sharding" in card["fix"]
        and "cast it" not in card["fix"]
        and "same shape" not in card["fix"]
    )
    assert "input sharding of params[0][0]" in card["detail"] and "'model'" in card["detail"]
    assert run.report["summary"]["value_reads"] == 2  # the loss read at each layout's end


# -- task "recompile" (session 9, issue 26): the truths and verdicts of its programs -------------


def test_truth_generate_static_second_request_compiles_nothing(
    truth: Callable[[str], Truth],
) -> None:
    t = truth("corpus_hf_generate_static.py")
    uncached, cached = (
        t.per_phase("UncachedCompile", "request:"),
        t.per_phase("CachedCompile", "request:"),
    )
    assert (
        uncached[0] >= 2 and uncached[1] == 0
    )  # several distinct graphs in request 1, none in request 2
    assert cached[1] == uncached[0]  # request 2 runs every graph of request 1 from the cache
    assert t.per_phase("MarkStep", "request:") == [0, 0]


def test_truth_mesh_reduce_compiles_in_epoch_1_only(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_mesh_reduce.py")
    assert t.per_phase("UncachedCompile", "mesh-reduce:") == [2, 0]  # its 2 internal graphs, once
    epoch2 = sum(
        t.total("UncachedCompile", p)
        for p in ("train:e2", "train-end:e2", "eval:e2", "mesh-reduce:e2")
    )
    assert t.total("UncachedCompile", "train:e1") == 1 and epoch2 == 0


def test_truth_buckets_compile_once_each(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_buckets.py")
    assert t.per_phase("UncachedCompile", "train:") == [1, 1] + [0] * 10  # bucket 48, bucket 64
    assert t.per_phase("CachedCompile", "train:")[2:] == [1] * 10


def test_no_recompile_where_nothing_compiled_again(corpus_run: Callable[[str], CorpusRun]) -> None:
    for program in ("corpus_hf_generate_static.py", "corpus_xla_mesh_reduce.py"):
        summary = corpus_run(program).report["summary"]
        assert summary["recompiles"] == 0 and summary["recompile_share"] == 0.0, program


def test_bucket_note_names_the_buckets(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_xla_buckets.py")
    [note] = run.findings
    assert note["severity"] == "low" and note["evidence"]["verdict"] == "bounded"
    assert note["evidence"]["shape_churn"]["values"] == [49, 65]  # the token tensor: bucket + 1
    assert "{49, 65}" in note["title"] and run.report["summary"]["recompiles"] == 0


def test_example_with_buckets_passes_fail_on_recompile(corpus_store: Path) -> None:
    """examples/variable_length.py with its own advice followed: no high card, `--fail-on recompile`
    passes (a bucket note is not a failure), and every share is a share (<= 100%)."""
    proc = run_tpuscope(
        "run",
        "--store",
        str(corpus_store),
        "--name",
        "buckets-example",
        "--fail-on",
        "recompile",
        "python",
        str(CORPUS.parent.parent / "examples" / "variable_length.py"),
        "--buckets",
        "48,64",
        "--steps",
        "6",
        cwd=corpus_store.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = [p for p in corpus_store.iterdir() if p.name.startswith("buckets-example-")]
    report = json.loads(
        run_tpuscope("show", "--store", str(corpus_store), run_dir.name, "--json").stdout
    )
    assert not [f["title"] for f in report["findings"] if f["severity"] == "high"]
    assert {(f["rule"], f["evidence"].get("verdict")) for f in report["findings"]} <= {
        ("recompile", "bounded")
    }
    assert 0.0 <= report["summary"]["recompile_share"] <= 1.0
