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
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuscope
from tests.corpus.truth import CORPUS, Truth, measure, where

pytestmark = pytest.mark.slow

Finding = tuple[str, str | None]  # (rule, "<file basename>:<line>" or None)


@dataclass(frozen=True)
class Card:
    """One corpus program: its backend, iteration count and the findings a correct tool reports."""

    program: str
    backend: str  # "xla" or "jax"
    iterations: int  # the program's loop iterations = the steps tpuscope must count
    expected: Callable[[], set[Finding]]  # called lazily: it reads the marker lines
    tpuscope_args: tuple[str, ...] = ()
    hlo: bool = False  # measure the truth with an XLA HLO dump (dot shapes)
    steps: int | None = None  # the steps when an iteration has no step boundary (default: iterations)
    env: tuple[tuple[str, str], ...] = ()  # environment for the tpuscope run (e.g. TPUSCOPE_HLO_SHAPES=1)


def _at(program: str, *pairs: tuple[str, str]) -> Callable[[], set[Finding]]:
    return lambda: {(rule, where(program, marker)) for rule, marker in pairs}


CARDS = {card.program: card for card in [
    # 12 train + 4 eval iterations over two MpDeviceLoaders; all compiles are first compiles.
    # tpuscope's steps: the 16 iterations, plus broadcast_master_param's sync (a setup step that
    # launches a graph) and the epoch-1 accuracy `.item()` read, which the next loader's first
    # mark_step closes as a step of its own (no graph launched, one host read): 18.
    Card("corpus_xla_mnist.py", "xla", 16, _at("corpus_xla_mnist.py"), steps=18),
    Card("corpus_xla_compile_loader.py", "xla", 12, _at("corpus_xla_compile_loader.py")),
    Card("corpus_xla_eager.py", "xla", 8, _at("corpus_xla_eager.py", ("op_by_op", "eager-on"))),
    # 3 requests; request 2 and 3 compile the same graph families at new lengths (prompt and
    # growing cache), aten::isin falls back inside generate(), and generate() reads values. The
    # shape churn is a facet of the recompile card (one root cause, one card). generate() never
    # marks a step (truth: MarkStep 0), so the whole program is one step: no tool can see requests.
    # The print line reads `out[0, length:]`: its small graph compiles again for each new length.
    # The whole program is one step, so recurrence between requests is not seen; the recompiles are
    # seen by identity: the same graph (same line, same input structure) at new input shapes, which
    # the default mode's per-graph shapes show.
    Card("corpus_hf_generate.py", "xla", 3, _at(
        "corpus_hf_generate.py", ("cpu_fallback", "generate"), ("host_sync", "generate"),
        ("recompile", "generate"), ("recompile", "print")), steps=1),
    Card("corpus_hf_train.py", "xla", 10, _at("corpus_hf_train.py")),
    # transformers reads the attention mask's values inside every forward: a host sync.
    Card("corpus_hf_train_mask.py", "xla", 8,
         _at("corpus_hf_train_mask.py", ("host_sync", "model-call"))),
    Card("corpus_xla_encoder_head64.py", "xla", 6,
         _at("corpus_xla_encoder_head64.py", ("tensorcore_underuse", "model-call")),
         tpuscope_args=("--deep",), hlo=True),
    Card("corpus_xla_short_trailing.py", "xla", 3, _at("corpus_xla_short_trailing.py")),
    Card("corpus_jax_flax_mnist.py", "jax", 12, _at("corpus_jax_flax_mnist.py")),
    Card("corpus_jax_shortbatch.py", "jax", 14,
         _at("corpus_jax_shortbatch.py", ("recompile", "step-call"))),
    # the varying length is the recompile card's shape-churn facet, not a card of its own; the
    # per-graph input shapes that name the dim come with --deep (the default mode says so)
    # --deep also prices the step graph on the target TPU: a tiny f32 GPT-2 runs its matmuls in
    # f32 (truth: every dot is f32), named at the user's model() line, not transformers' code
    # the default mode (issue 26): the recompile card names dim 1 and its sizes from the shapes
    # every compile carries without --deep; the --deep run (tensorcore_underuse) is below.
    Card("corpus_hf_varlen.py", "xla", 8, _at("corpus_hf_varlen.py", ("recompile", "sync"))),
    # the forward falls back at the user's forward line (the innermost user frame), the
    # backward's fallback runs inside `loss.backward()`.
    Card("corpus_xla_fallback.py", "xla", 8, _at(
        "corpus_xla_fallback.py", ("cpu_fallback", "embedding-call"), ("cpu_fallback", "backward"))),
    # --- issue 26, "steps wherever the loop lives" (helper xsteps): loops a framework owns ---
    # HF Trainer: 12 optimizer steps are 12 steps, whatever boundaries the trainer passes (its
    # logging pass's mark_step, mesh_reduce's syncs, the flush after the loop). transformers reads
    # a value inside every forward (masking_utils.find_packed_sequence_indices: position_ids
    # without a mask or cache), and the logging pass reads the loss and grad norm: a host sync at
    # the user's `trainer.train()` line. The logging pass's first-time reductions are distinct
    # one-off graphs, not recompiles (truth: nothing compiles in the later logging passes).
    Card("corpus_hf_trainer.py", "xla", 12, _at("corpus_hf_trainer.py", ("host_sync", "train"))),
    # torch.compile(train_model, backend="openxla"): 12 calls of the compiled step, no
    # mark_step anywhere. Steps: the 12 calls plus the program's own setup torch_xla.sync(),
    # which launches a graph (a setup step, as in corpus_xla_mnist.py). Nothing to report.
    Card("corpus_xla_dynamo_train.py", "xla", 12, _at("corpus_xla_dynamo_train.py"), steps=13),
    # SPMD data parallelism over 4 CPU devices (one process): a sharded step is one step; the
    # logged loss is read in a step closure, after the step's graph: nothing to report.
    Card("corpus_xla_spmd_dp.py", "xla", 12, _at("corpus_xla_spmd_dp.py")),
    # -- issue 26, JAX beyond jit (helper "jax"): loops a framework owns, pmap, sharded jit --------
    # Keras 3 `fit` on JAX: 12 iterations of Keras's jitted train_step (the step: the program jits
    # nothing of its own); the short last batch of epoch 1 compiles it again, at the user's fit line.
    Card("corpus_jax_keras_fit.py", "jax", 12, _at("corpus_jax_keras_fit.py", ("recompile", "fit"))),
    # pmap: the train step compiles again at iteration 1 (its inputs came on replicate()'s mesh),
    # the eval step again for the short last eval batch after one cached call.
    Card("corpus_jax_pmap.py", "jax", 12, _at("corpus_jax_pmap.py", ("recompile", "step-call"),
                                              ("recompile", "eval-call"))),
    # jit over NamedSharding inputs: `update` compiles again when the layout moves to a 2-d mesh.
    Card("corpus_jax_sharding.py", "jax", 12, _at("corpus_jax_sharding.py", ("recompile", "step-call"))),
    # -- issue 26 "Every CPU fallback" (helper fallback): fallbacks outside `aten::` -------------
    # torchvision detection post-processing: aten::nonzero (2 lines; the card is at the first
    # called), torchvision::nms and torchvision::roi_align every batch; the graphs cut at the
    # data-dependent lines compile again as the kept boxes change (truth: every batch compiles);
    # the evaluator's `.cpu()` of the detections reads 3 values a batch (host sync). The
    # fallbacks' own reads are the fallback cards', not host syncs.
    Card("corpus_tv_detect_postprocess.py", "xla", 8, _at(
        "corpus_tv_detect_postprocess.py", ("cpu_fallback", "score-filter"), ("cpu_fallback", "nms"),
        ("cpu_fallback", "roi"), ("host_sync", "read"), ("recompile", "small-boxes"), ("recompile", "nms"),
        ("recompile", "roi"), ("recompile", "sync"))),
    # a stock torchvision resnet18 trains clean on torch_xla (truth: no fallback, 2 warm-up compiles)
    Card("corpus_tv_resnet_train.py", "xla", 6, _at("corpus_tv_resnet_train.py")),
    # a torch.library custom op with a CPU kernel only runs on the host every step
    Card("corpus_xla_fallback_custom_op.py", "xla", 6, _at("corpus_xla_fallback_custom_op.py", ("cpu_fallback", "custom-op"))),
    # -- task "recompile" (session 9, issue 26: recompiles by graph identity and recurrence) ------
    # generate() with a static cache, 2 identical requests; generate() never marks a step, so the
    # program is one step. Request 1 cuts 14 distinct graphs at the one line, request 2 compiles
    # nothing: no recompile. aten::isin falls back and generate() reads values (as corpus_hf_generate).
    Card("corpus_hf_generate_static.py", "xla", 2, _at(
        "corpus_hf_generate_static.py", ("cpu_fallback", "generate"), ("host_sync", "generate")), steps=1),
    # 20 train + 4 eval iterations over two MpDeviceLoaders; mesh_reduce's syncs are inside its call
    # and end no step; epoch 1's accuracy `.item()` read is closed as a step of its own by epoch 2's
    # first loader mark_step (as in corpus_xla_mnist.py), epoch 2's comes after the loop: 25 steps.
    # mesh_reduce compiles its 2 internal graphs in its first call only: no recompile.
    Card("corpus_xla_mesh_reduce.py", "xla", 24, _at("corpus_xla_mesh_reduce.py"), steps=25),
    # tpuscope's bucketing advice followed: 2 bucket graphs, each compiled once, then 10 steps from the
    # cache: a low note naming the buckets (the default mode's per-graph shapes), which
    # `--fail-on recompile` does not fail on (exit status 0, as without it).
    Card("corpus_xla_buckets.py", "xla", 12, _at("corpus_xla_buckets.py", ("recompile", "sync")),
         tpuscope_args=("--fail-on", "recompile")),
    # -- end of task "recompile" ----------------------------------------------------------------
]}
PROGRAMS = list(CARDS)
JAX_PROGRAMS = [p for p, c in CARDS.items() if c.backend == "jax"]
TORCH_XLA_WORDS = ("torch_xla", "PJRT_DEVICE", "DataLoader(drop_last", "xm.", "mark_step",
                   "PT_XLA", "MpDeviceLoader")


@dataclass
class CorpusRun:
    run_dir: Path
    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]  # `tpuscope show RUN --json`

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.report.get("findings", [])

    def pairs(self) -> set[Finding]:
        return {(f["rule"], _short(f.get("location"))) for f in self.findings}


def _short(location: str | None) -> str | None:
    if not location:
        return None
    path, _, line = str(location).rpartition(":")
    return f"{Path(path).name}:{line}" if path else Path(str(location)).name


@pytest.fixture(scope="session")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh store; CORPUS_STORE=DIR keeps the session's runs in a new folder under DIR."""
    keep = os.environ.get("CORPUS_STORE")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="corpus-", dir=keep))
    return tmp_path_factory.mktemp("corpus-store")


@pytest.fixture(scope="session")
def corpus_run(corpus_store: Path) -> Callable[[str], CorpusRun]:
    """corpus_run("corpus_xla_mnist.py") -> the program's one tpuscope run of this session."""
    cache: dict[str, CorpusRun] = {}

    def get(program: str) -> CorpusRun:
        if program not in cache:
            card = CARDS[program]
            name = f"c{len(cache)}-{Path(program).stem}"
            proc = run_tpuscope("run", "--store", str(corpus_store), "--name", name, "--quiet", "--alerts", "on",
                                *card.tpuscope_args, "python", str(CORPUS / program),
                                cwd=corpus_store.parent, env=dict(card.env) or None)
            runs = sorted(p for p in corpus_store.iterdir() if p.name.startswith(f"{name}-"))
            assert runs, f"no run folder made for {program}: {proc.stderr[-3000:]}"
            shown = run_tpuscope("show", "--store", str(corpus_store), runs[-1].name, "--json")
            assert shown.returncode == 0, shown.stderr[-3000:]
            cache[program] = CorpusRun(runs[-1], proc, json.loads(shown.stdout))
        return cache[program]

    return get


@pytest.fixture(scope="session")
def truth() -> Callable[[str], Truth]:
    """truth("corpus_xla_mnist.py") -> its ground truth, measured once per session without tpuscope."""
    cache: dict[str, Truth] = {}

    def get(program: str) -> Truth:
        if program not in cache:
            cache[program] = measure(program, hlo=CARDS[program].hlo)
            assert cache[program].returncode == 0, cache[program].stderr[-3000:]
        return cache[program]

    return get


# (a) the ground truth, measured without tpuscope ---------------------------------------------

def test_truth_mnist_compiles_in_epoch_1_only(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_mnist.py")
    phases = ("train:e{}", "train-end:e{}", "eval:e{}", "eval-end:e{}")
    epoch1 = t.total("UncachedCompile", "setup") + sum(t.total("UncachedCompile", p.format(1)) for p in phases)
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


def test_truth_compile_loader_two_compiles_in_twelve_iterations(truth: Callable[[str], Truth]) -> None:
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
    assert abs(sum(samples) - sum(steady)) <= steady[0]  # at most one step's samples still in flight
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
    assert ("f32[12,64,64]", "f32[12,64,64]", "f32[12,64,64]") in shapes  # q @ k^T, attn @ v per head
    assert ("f32[256,192]", "f32[192,576]", "f32[256,576]") in shapes  # fused qkv projection
    assert t.per_phase("UncachedCompile", "infer:")[1:] == [0] * 5
    assert t.fallback_ops == []


def test_truth_hf_mask_reads_values_inside_every_forward(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_train_mask.py")
    reads = t.per_phase("aten::_local_scalar_dense", "train:")
    # 2 reads inside model() every step, +1 for the loss.item() logged at steps 0 and 4
    assert reads == [3, 2, 2, 2, 3, 2, 2, 2]
    assert t.per_phase("UncachedCompile", "train:")[2:] == [0] * 6
    assert t.per_phase("CachedCompile", "train:")[2:] == [3] * 6  # the reads cut each step in 3 graphs
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


# --- issue 26 truth (helper xsteps): loops a framework owns ---

def test_truth_hf_trainer_compiles_in_its_first_logging_pass_only(truth: Callable[[str], Truth]) -> None:
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


def test_truth_dynamo_calls_run_cached_graphs_without_a_step_marker(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_dynamo_train.py")
    assert t.per_phase("UncachedCompile", "train:") == [4, 1] + [0] * 10  # traced in call 1, inputs' graph in 2
    assert t.per_phase("CachedCompile", "train:") == [0, 0] + [1] * 10  # the inputs' lazy graph, every call
    assert t.per_phase("MarkStep", "train:") == [0] * 12  # no step boundary in the loop
    # 4 executions a call (3 cached graphs + the inputs' graph) + the final read's 1; samples of
    # an asynchronous execution land at the next mark, so only the sum is exact
    assert t.total("metric:ExecuteTime", "train:") + t.total("metric:ExecuteTime", "after-loop") == 12 * 4 + 1
    assert t.work("after-loop")["UncachedCompile"] == 1
    assert t.extra["dynamo_stats"]["unique_graphs"] >= 1
    assert t.fallback_ops == []


def test_truth_spmd_step_compiles_twice_over_four_devices(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_spmd_dp.py")
    assert t.extra["devices"] == 4
    assert t.per_phase("UncachedCompile", "train:") == [1, 1] + [0] * 10  # SGD momentum at iteration 1
    assert t.per_phase("CachedCompile", "train:")[2:] == [1] * 10
    assert t.total("aten::_local_scalar_dense", "train:") == 3  # the closures' loss.item(), every 4 steps
    assert t.fallback_ops == []
# -- issue 26 "Every CPU fallback" (helper fallback): truth of the programs outside `aten::` ----
def test_truth_tv_detection_fallbacks_in_three_namespaces(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_tv_detect_postprocess.py")
    assert t.fallback_ops == ["aten::nonzero", "torchvision::nms", "torchvision::roi_align"]
    assert t.per_phase("aten::nonzero", "infer:") == [2] * 8  # torch.where(...)[0], remove_small_boxes
    assert t.per_phase("torchvision::nms", "infer:") == [1] * 8  # batched_nms
    assert t.per_phase("torchvision::roi_align", "infer:") == [1] * 8
    # every fallback call copies its inputs to the host once (4), then 3 `.cpu()` reads
    assert t.per_phase("xla::_to_cpu", "infer:") == [4] * 8
    assert t.per_phase("metric:TransferFromDeviceTime", "infer:") == [7] * 8
    assert t.total("aten::_local_scalar_dense", "infer:") == 0  # no value read: fallbacks and copies
    assert len(set(t.extra["kept"])) > 1  # the kept boxes depend on the data ...
    assert all(n > 0 for n in t.per_phase("UncachedCompile", "infer:")[1:])  # ... and every batch compiles


def test_truth_tv_resnet_trains_without_fallbacks(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_tv_resnet_train.py")
    assert t.fallback_ops == []
    assert t.per_phase("UncachedCompile", "train:") == [1, 1, 0, 0, 0, 0]  # momentum buffers at step 1
    assert t.total("aten::_local_scalar_dense", "train:") == 2  # the two logged losses


def test_truth_custom_op_fallback_every_step(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_fallback_custom_op.py")
    assert t.fallback_ops == ["corpus_ops::numpy_tanh"]
    assert t.per_phase("corpus_ops::numpy_tanh", "train:") == [1] * 6
    assert t.per_phase("UncachedCompile", "train:")[1:] == [0] * 5
    assert t.total("aten::_local_scalar_dense", "train:") == 0  # the one `.item()` is after the loop
    assert t.work("after-loop")["aten::_local_scalar_dense"] == 1


def test_fallback_cards_name_ops_outside_aten(corpus_run: Callable[[str], CorpusRun]) -> None:
    """Each card names its op and its fix; the value reads the fallbacks make are not host syncs."""
    run = corpus_run("corpus_tv_detect_postprocess.py")
    ops = {f["evidence"]["op"]: f for f in run.findings if f["rule"] == "cpu_fallback"}
    assert set(ops) == {"aten::nonzero", "torchvision::nms", "torchvision::roi_align"}
    assert "XLA_EXPERIMENTAL=nms" in ops["torchvision::nms"]["fix"]
    [sync] = [f for f in run.findings if f["rule"] == "host_sync"]
    assert [s["location"] for s in sync["evidence"]["sites"]] == [sync["location"]]  # only the `.cpu()` line
    assert {o["op"] for o in run.report["summary"]["fallback_ops"]} == set(ops)
    [custom] = [f for f in corpus_run("corpus_xla_fallback_custom_op.py").findings if f["rule"] == "cpu_fallback"]
    assert custom["evidence"]["op"] == "corpus_ops::numpy_tanh" and 'register_kernel("xla")' in custom["fix"]


# (b) the program runs unchanged under tpuscope ------------------------------------------------

@pytest.mark.parametrize("program", PROGRAMS)
def test_same_output_and_exit_with_tpuscope(program: str, truth: Callable[[str], Truth],
                                            corpus_run: Callable[[str], CorpusRun]) -> None:
    plain, run = truth(program), corpus_run(program)
    assert run.proc.returncode == plain.returncode == 0, run.proc.stderr[-3000:]
    assert run.proc.stdout == plain.stdout
    assert run.report["summary"]["exit_code"] == 0


# (c) steps are the program's iterations ------------------------------------------------------

@pytest.mark.parametrize("program", PROGRAMS)
def test_steps_equal_iterations(program: str, corpus_run: Callable[[str], CorpusRun]) -> None:
    card = CARDS[program]
    assert corpus_run(program).report["summary"]["steps"] == (card.steps or card.iterations)


# (d) exactly the findings the truth implies ---------------------------------------------------

@pytest.mark.parametrize("program", PROGRAMS)
def test_exact_findings(program: str, corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run(program)
    assert run.pairs() == CARDS[program].expected(), [f["title"] for f in run.findings]


_ALERTED = re.compile(r"^tpuscope: (?:step \d+: )?(?:(recompile) of (?:the graph from )?(?:\S+ at )?|new CPU "
                      r"(fallback) \S+ at )(\S+:\d+) \(")


@pytest.mark.parametrize("program", PROGRAMS)
def test_live_alerts_name_the_reports_recompiles_and_fallbacks(program: str,
                                                               corpus_run: Callable[[str], CorpusRun]) -> None:
    """`--alerts on`: one line per recompile site and fallback op of the report, at its line, and
    nothing for a program whose report has neither (tpuscope/launch/alerts/: the same rules)."""
    run = corpus_run(program)
    said = [line for line in run.proc.stderr.splitlines()
            if re.match(r"tpuscope: (?:step \d+: )?(?:recompile of|new CPU fallback)", line)]
    pairs = set()
    for line in said:
        match = _ALERTED.match(line)
        assert match, line
        pairs.add(("recompile" if match[1] else "cpu_fallback", _short(match[3])))
    assert len(pairs) == len(said), said  # once per problem
    expected = {p for p in run.pairs() if p[0] in ("recompile", "cpu_fallback")}
    # past MAX_NEW new problems per window, the printer folds the rest into one summing-up line
    # that names them ("2 more new problems (torchvision::nms, torchvision::roi_align; ...)")
    folded = [m for line in run.proc.stderr.splitlines()
              for m in re.findall(r"(\d+) more new problems? \((.*?); the report lists them\)", line)]
    named = [label for _, labels in folded for label in labels.split(", ") if label != "..."]
    cards = json.dumps([f for f in run.findings if f["rule"] in ("recompile", "cpu_fallback")])
    assert all(label in cards for label in named), (named, said)
    assert pairs <= expected and len(pairs) + sum(int(n) for n, _ in folded) == len(expected), said


@pytest.mark.parametrize("program", JAX_PROGRAMS)
def test_jax_findings_say_nothing_of_torch_xla(program: str, corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run(program)
    assert run.report["summary"]["backend"] == "jax"
    text = json.dumps(run.findings)
    assert [w for w in TORCH_XLA_WORDS if w in text] == []


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


def test_generate_value_reads_are_host_syncs_not_fallbacks(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_hf_generate.py")
    fallbacks = [f for f in run.findings if f["rule"] == "cpu_fallback"]
    assert fallbacks and all("isin" in f["title"] + f["detail"] for f in fallbacks)
    assert not any("_local_scalar_dense" in f["title"] for f in fallbacks)
    assert any(f["rule"] == "host_sync" for f in run.findings)


def test_encoder_underuse_names_head_dim_at_the_users_line(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_xla_encoder_head64.py")
    underuse = [f for f in run.findings if f["rule"] == "tensorcore_underuse"]
    assert underuse and any("head_dim" in f["title"] + f["detail"] for f in underuse)
    for f in underuse:
        assert _short(f["location"]) == where("corpus_xla_encoder_head64.py", "model-call")
        assert "linear.py" not in (f.get("location") or "") and "functional.py" not in (f.get("location") or "")


def test_varlen_recompile_carries_its_shape_churn(corpus_run: Callable[[str], CorpusRun]) -> None:
    """One root cause, one card: the varying sequence length and its compiles are facets."""
    [card] = [f for f in corpus_run("corpus_hf_varlen.py").findings if f["rule"] == "recompile"]
    churn = card["evidence"]["shape_churn"]
    assert churn["dim"] == 1 and churn["values"] == [16, 24, 32]  # truth: lengths 16, 24, 32
    assert card["step_runs"] == [[3, 3], [5, 5]] and "pad" in card["fix"]


# -- issue 26, JAX beyond jit (helper "jax"): truth and what the cards say -----------------------

def test_truth_keras_fit_compiles_train_step_for_the_short_batch(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_jax_keras_fit.py")
    compiles = t.jax_compiles("train_step")
    assert [c["label"] for c in compiles] == ["train:i0", "train:i5"]  # epoch 2's short batch: cached
    assert "float32[32,28,28,1]" in compiles[0]["shapes"] and "float32[8,28,28,1]" in compiles[1]["shapes"]
    assert [c["label"] for c in t.jax_compiles("test_step")] == ["after-fit"]
    assert t.extra["iterations"] == 12


def test_truth_pmap_compiles_train_step_twice_and_eval_for_the_short_batch(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_jax_pmap.py")
    compiles = t.jax_compiles("_fun")  # jax 0.10's pmap: jit(shard_map(_fun)) of the user's function
    assert [c["label"] for c in compiles] == ["train:i0", "train:i1", "eval:b0", "eval:b2"]
    assert compiles[0]["shapes"] == compiles[1]["shapes"]  # the same program compiled again (sharding)
    assert "float32[2,8,64]" in compiles[2]["shapes"] and "float32[2,4,64]" in compiles[3]["shapes"]
    assert t.stdout.startswith("devices 2")


def test_truth_sharded_update_compiles_again_for_the_new_layout(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_jax_sharding.py")
    compiles = t.jax_compiles("update")
    assert [c["label"] for c in compiles] == ["train:data-parallel:i0", "train:data+model-parallel:i6"]
    assert "@model" not in compiles[0]["shapes"] and "float32[64,128@model]" in compiles[1]["shapes"]


def test_keras_fit_steps_are_keras_train_step_calls(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_jax_keras_fit.py")
    [card] = [f for f in run.findings if f["rule"] == "recompile"]
    assert "train_step" in card["title"] and card["step_runs"] == [[5, 5]]
    # JAX does not explain Keras's jit: tpuscope names the argument from the call it tracked
    assert "data[0]" in card["title"] and "data[0]: f32[32,28,28,1] -> f32[8,28,28,1]" in card["detail"]
    assert "short last batch" in card["fix"]
    import tpuscope

    [proc] = tpuscope.load_run(run.run_dir).meta["processes"]
    assert proc["jax_step_source"].startswith("calls of jitted train_step (") and "keras" in proc["jax_step_source"]


def test_pmap_compiles_are_the_users_functions_with_the_sharding_named(corpus_run: Callable[[str], CorpusRun]) -> None:
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


def test_sharding_retrace_advice_names_sharding_not_dtype(corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run("corpus_jax_sharding.py")
    [card] = [f for f in run.findings if f["rule"] == "recompile"]
    assert card["step_runs"] == [[6, 6]]
    assert "sharding" in card["fix"] and "cast it" not in card["fix"] and "same shape" not in card["fix"]
    assert "input sharding of params[0][0]" in card["detail"] and "'model'" in card["detail"]
    assert run.report["summary"]["value_reads"] == 2  # the loss read at each layout's end
# --- issue 26, helper "shapes": per-graph shapes in the default mode ------------------------------
# corpus_hf_varlen.py's card above runs in the default mode; its recompile card's shape churn
# (test_varlen_recompile_carries_its_shape_churn) comes from the HLO dump tpuscope now adds by
# default. --deep adds the HLO with each op's line, which the tensorcore rule needs: that finding
# keeps its own run here.

@pytest.fixture(scope="session")
def varlen_deep(corpus_store: Path) -> CorpusRun:
    proc = run_tpuscope("run", "--store", str(corpus_store), "--name", "deep-varlen", "--quiet", "--deep",
                        "python", str(CORPUS / "corpus_hf_varlen.py"), cwd=corpus_store.parent)
    [run_dir] = [p for p in corpus_store.iterdir() if p.name.startswith("deep-varlen-")]
    shown = run_tpuscope("show", "--store", str(corpus_store), run_dir.name, "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    return CorpusRun(run_dir, proc, json.loads(shown.stdout))


def test_varlen_deep_adds_tensorcore_underuse(varlen_deep: CorpusRun) -> None:
    assert varlen_deep.proc.returncode == 0, varlen_deep.proc.stderr[-3000:]
    assert varlen_deep.report["summary"]["steps"] == 8
    assert varlen_deep.pairs() == {("recompile", where("corpus_hf_varlen.py", "sync")),
                                   ("tensorcore_underuse", where("corpus_hf_varlen.py", "model-call"))}


def test_varlen_default_mode_compiles_carry_shapes_and_leave_no_dump(
        corpus_run: Callable[[str], CorpusRun], truth: Callable[[str], Truth]) -> None:
    """Every compile of the train step has its graph's shapes (the token batch s64[4,length] among
    them, truth: lengths 16, 24, 32 compile); tpuscope's dump folder is gone with the run."""
    from tpuscope.store import Run

    run = corpus_run("corpus_hf_varlen.py")
    compiles = Run(run.run_dir).compiles
    assert all(shapes is not None and len(shapes) for shapes in compiles["input_shapes"])
    tokens = [[s for s in shapes if s.startswith("s64[4,")] for shapes in compiles["input_shapes"]]
    lengths = sorted({int(s[len("s64[4,"):-1]) for found in tokens for s in found})
    assert lengths == sorted(set(truth("corpus_hf_varlen.py").extra["lengths"]))
    assert not list((run.run_dir / "debug").glob("hlo-*"))
# -- task "recompile" (session 9, issue 26): the truths and verdicts of its programs -------------

def test_truth_generate_static_second_request_compiles_nothing(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_hf_generate_static.py")
    uncached, cached = t.per_phase("UncachedCompile", "request:"), t.per_phase("CachedCompile", "request:")
    assert uncached[0] >= 2 and uncached[1] == 0  # several distinct graphs in request 1, none in request 2
    assert cached[1] == uncached[0]  # request 2 runs every graph of request 1 from the cache
    assert t.per_phase("MarkStep", "request:") == [0, 0]


def test_truth_mesh_reduce_compiles_in_epoch_1_only(truth: Callable[[str], Truth]) -> None:
    t = truth("corpus_xla_mesh_reduce.py")
    assert t.per_phase("UncachedCompile", "mesh-reduce:") == [2, 0]  # its 2 internal graphs, once
    epoch2 = sum(t.total("UncachedCompile", p) for p in ("train:e2", "train-end:e2", "eval:e2", "mesh-reduce:e2"))
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
    proc = run_tpuscope("run", "--store", str(corpus_store), "--name", "buckets-example", "--fail-on", "recompile",
                        "python", str(CORPUS.parent.parent / "examples" / "variable_length.py"), "--buckets",
                        "48,64", "--steps", "6", cwd=corpus_store.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = [p for p in corpus_store.iterdir() if p.name.startswith("buckets-example-")]
    report = json.loads(run_tpuscope("show", "--store", str(corpus_store), run_dir.name, "--json").stdout)
    assert not [f["title"] for f in report["findings"] if f["severity"] == "high"]
    assert {(f["rule"], f["evidence"].get("verdict")) for f in report["findings"]} <= {("recompile", "bounded")}
    assert 0.0 <= report["summary"]["recompile_share"] <= 1.0
