"""The corpus's machinery, shared by tests/test_corpus.py and tests/test_corpus_idioms.py: the
cards (every program's iterations and expected findings), the session fixtures (each program's
truth and its one tpuscope run) and the tests every program gets. Each test module names its
programs (`parametrize_programs` in its `pytest_generate_tests`), so the two halves of the corpus
run on two xdist workers (`--dist loadfile`) and no program runs twice.
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
from tpuscope.schema_consts import ADVICE_RULES

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
    steps: int | None = (
        None  # the steps when an iteration has no step boundary (default: iterations)
    )
    env: tuple[
        tuple[str, str], ...
    ] = ()  # environment for the tpuscope run (e.g. TPUSCOPE_HLO_SHAPES=1)


def _at(program: str, *pairs: tuple[str, str]) -> Callable[[], set[Finding]]:
    return lambda: {(rule, where(program, marker)) for rule, marker in pairs}


CARDS = {
    card.program: card
    for card in [
        # 12 train + 4 eval iterations over two MpDeviceLoaders; all compiles are first compiles.
        # tpuscope's steps: the 16 iterations. broadcast_master_param's sync is setup (a boundary the
        # loop never passes again: analyze/judge.phases), and the epoch-1 accuracy `.item()`
        # read goes into epoch 2's first step (a loader's first sync of a pass ends no step).
        Card("corpus_xla_mnist.py", "xla", 16, _at("corpus_xla_mnist.py")),
        Card("corpus_xla_compile_loader.py", "xla", 12, _at("corpus_xla_compile_loader.py")),
        Card("corpus_xla_eager.py", "xla", 8, _at("corpus_xla_eager.py", ("op_by_op", "eager-on"))),
        # 3 requests; request 2 and 3 compile the same graph families at new lengths (prompt and
        # growing cache), aten::isin falls back inside generate(), and generate() reads values. The
        # shape churn is a facet of the recompile card (one root cause, one card). generate() never
        # marks a step (truth: MarkStep 0); each request is one call of it, whose return is the step
        # boundary (collect/xla/library_loops.py, session 11): 3 requests, 3 steps.
        # The print line reads `out[0, length:]`: its small graph compiles again for each new length.
        Card(
            "corpus_hf_generate.py",
            "xla",
            3,
            _at(
                "corpus_hf_generate.py",
                ("cpu_fallback", "generate"),
                ("host_sync", "generate"),
                ("recompile", "generate"),
                ("recompile", "print"),
            ),
        ),
        Card("corpus_hf_train.py", "xla", 10, _at("corpus_hf_train.py")),
        # transformers reads the attention mask's values inside every forward: a host sync.
        Card(
            "corpus_hf_train_mask.py",
            "xla",
            8,
            _at("corpus_hf_train_mask.py", ("host_sync", "model-call")),
        ),
        Card(
            "corpus_xla_encoder_head64.py",
            "xla",
            6,
            _at("corpus_xla_encoder_head64.py", ("tensorcore_underuse", "model-call")),
            tpuscope_args=("--deep",),
            hlo=True,
        ),
        Card("corpus_xla_short_trailing.py", "xla", 3, _at("corpus_xla_short_trailing.py")),
        Card("corpus_jax_flax_mnist.py", "jax", 12, _at("corpus_jax_flax_mnist.py")),
        Card(
            "corpus_jax_shortbatch.py",
            "jax",
            14,
            _at("corpus_jax_shortbatch.py", ("recompile", "step-call")),
        ),
        # the varying length is the recompile card's shape-churn facet, not a card of its own; the
        # per-graph input shapes that name the dim come with --deep (the default mode says so)
        # --deep also prices the step graph on the target TPU: a tiny f32 GPT-2 runs its matmuls in
        # f32 (truth: every dot is f32), named at the user's model() line, not transformers' code
        # the default mode (issue 26): the recompile card names dim 1 and its sizes from the shapes
        # every compile carries without --deep; the --deep run (tensorcore_underuse) is below.
        Card("corpus_hf_varlen.py", "xla", 8, _at("corpus_hf_varlen.py", ("recompile", "sync"))),
        # the forward falls back at the user's forward line (the innermost user frame), the
        # backward's fallback runs inside `loss.backward()`.
        Card(
            "corpus_xla_fallback.py",
            "xla",
            8,
            _at(
                "corpus_xla_fallback.py",
                ("cpu_fallback", "embedding-call"),
                ("cpu_fallback", "backward"),
            ),
        ),
        # --- issue 26, "steps wherever the loop lives" (helper xsteps): loops a framework owns ---
        # HF Trainer: 12 optimizer steps are 12 steps, whatever boundaries the trainer passes (its
        # logging pass's mark_step, mesh_reduce's syncs, the flush after the loop). transformers reads
        # a value inside every forward (masking_utils.find_packed_sequence_indices: position_ids
        # without a mask or cache), and the logging pass reads the loss and grad norm: a host sync at
        # the user's `trainer.train()` line. The logging pass's first-time reductions are distinct
        # one-off graphs, not recompiles (truth: nothing compiles in the later logging passes).
        Card(
            "corpus_hf_trainer.py", "xla", 12, _at("corpus_hf_trainer.py", ("host_sync", "train"))
        ),
        # torch.compile(train_model, backend="openxla"): 12 calls of the compiled step, no
        # mark_step anywhere. Steps: the 12 calls; the program's own setup torch_xla.sync(), which
        # launches a graph, is setup (as in corpus_xla_mnist.py), not a step. Nothing to report.
        Card("corpus_xla_dynamo_train.py", "xla", 12, _at("corpus_xla_dynamo_train.py")),
        # SPMD data parallelism over 4 CPU devices (one process): a sharded step is one step; the
        # logged loss is read in a step closure, after the step's graph: nothing to report.
        Card("corpus_xla_spmd_dp.py", "xla", 12, _at("corpus_xla_spmd_dp.py")),
        # -- issue 26, JAX beyond jit (helper "jax"): loops a framework owns, pmap, sharded jit --------
        # Keras 3 `fit` on JAX: 12 iterations of Keras's jitted train_step (the step: the program jits
        # nothing of its own); the short last batch of epoch 1 compiles it again, at the user's fit line.
        Card(
            "corpus_jax_keras_fit.py",
            "jax",
            12,
            _at("corpus_jax_keras_fit.py", ("recompile", "fit")),
        ),
        # Keras 3 `fit` with RandomRotation and RandomZoom in the model (keras-io's ViT idiom): Keras does not jit
        # a model with a layer that cannot be jitted, so `fit` dispatches every op one by one (the
        # ViT on a v5e: 14 s a batch); its first batch compiles 164 ops on their own. No jitted
        # step: Keras's batch callbacks bracket the steps (collect/jax/keras_batches.py), one a
        # batch. op_by_op names both layers; the reads are Keras's own eager index reads (8 a
        # batch).
        Card(
            "corpus_jax_keras_augment.py",
            "jax",
            10,
            _at("corpus_jax_keras_augment.py", ("op_by_op", "fit"), ("host_sync", "fit")),
        ),
        # pmap: the train step compiles again at iteration 1 (its inputs came on replicate()'s mesh),
        # the eval step again for the short last eval batch after one cached call.
        Card(
            "corpus_jax_pmap.py",
            "jax",
            12,
            _at("corpus_jax_pmap.py", ("recompile", "step-call"), ("recompile", "eval-call")),
        ),
        # jit over NamedSharding inputs: `update` compiles again when the layout moves to a 2-d mesh.
        Card(
            "corpus_jax_sharding.py",
            "jax",
            12,
            _at("corpus_jax_sharding.py", ("recompile", "step-call")),
        ),
        # -- issue 26 "Every CPU fallback" (helper fallback): fallbacks outside `aten::` -------------
        # torchvision detection post-processing: aten::nonzero (2 lines; the card is at the first
        # called), torchvision::nms and torchvision::roi_align every batch; the graphs cut at the
        # data-dependent lines compile again as the kept boxes change (truth: every batch compiles);
        # the evaluator's `.cpu()` of the detections reads 3 values a batch (host sync). The
        # fallbacks' own reads are the fallback cards', not host syncs.
        Card(
            "corpus_tv_detect_postprocess.py",
            "xla",
            8,
            _at(
                "corpus_tv_detect_postprocess.py",
                ("cpu_fallback", "score-filter"),
                ("cpu_fallback", "nms"),
                ("cpu_fallback", "roi"),
                ("host_sync", "read"),
                ("recompile", "small-boxes"),
                ("recompile", "nms"),
                ("recompile", "roi"),
                ("recompile", "sync"),
            ),
        ),
        # a stock torchvision resnet18 trains clean on torch_xla (truth: no fallback, 2 warm-up compiles)
        Card("corpus_tv_resnet_train.py", "xla", 6, _at("corpus_tv_resnet_train.py")),
        # a torch.library custom op with a CPU kernel only runs on the host every step
        Card(
            "corpus_xla_fallback_custom_op.py",
            "xla",
            6,
            _at("corpus_xla_fallback_custom_op.py", ("cpu_fallback", "custom-op")),
        ),
        # -- task "recompile" (session 9, issue 26: recompiles by graph identity and recurrence) ------
        # generate() with a static cache, 2 identical requests; each request is one generate() call, a
        # step (session 11: its return is the boundary, as for corpus_hf_generate.py). Request 1 cuts 14
        # distinct graphs at the one line, request 2 compiles nothing: no recompile. aten::isin falls
        # back and generate() reads values (8 `.item()`-style reads a request, at the generate line;
        # the print's `.tolist()` is 1).
        Card(
            "corpus_hf_generate_static.py",
            "xla",
            2,
            _at(
                "corpus_hf_generate_static.py",
                ("cpu_fallback", "generate"),
                ("host_sync", "generate"),
            ),
        ),
        # 20 train + 4 eval iterations over two MpDeviceLoaders; mesh_reduce's syncs are inside its call
        # and end no step; epoch 1's accuracy `.item()` read and mesh_reduce go into epoch 2's first
        # step (a loader's first sync of a pass ends no step), epoch 2's come after the loop: 24 steps.
        # mesh_reduce compiles its 2 internal graphs in its first call only: no recompile.
        Card("corpus_xla_mesh_reduce.py", "xla", 24, _at("corpus_xla_mesh_reduce.py")),
        # tpuscope's bucketing advice followed: 2 bucket graphs, each compiled once, then 10 steps from the
        # cache: a low note naming the buckets (the default mode's per-graph shapes), which
        # `--fail-on recompile` does not fail on (exit status 0, as without it).
        Card(
            "corpus_xla_buckets.py",
            "xla",
            12,
            _at("corpus_xla_buckets.py", ("recompile", "sync")),
            tpuscope_args=("--fail-on", "recompile"),
        ),
        # -- end of task "recompile" ----------------------------------------------------------------
        # -- session 12, issue 26: a loop that never syncs (its steps are its optimizer steps) ----------
        # PyTorch's Quickstart moved to torch_xla by its device alone: train() reads the loss every 5
        # batches, test() reads the accuracy of its one batch; nothing syncs, so every read compiles a
        # new graph holding every step so far (truth: each read 1 UncachedCompile, never cached). The
        # epochs' second reads at each line are recompiles of that line's growing graph; 10 optimizer
        # steps are 10 steps; 4 reads in 10 steps are no host_sync card.
        Card(
            "corpus_xla_quickstart_nosync.py",
            "xla",
            10,
            _at(
                "corpus_xla_quickstart_nosync.py",
                ("recompile", "log-read"),
                ("recompile", "test-read"),
            ),
        ),
        # -- issue 42, tried as a new user would ------------------------------------------------------
        # 4 train + 2 eval iterations per epoch, 2 epochs, each ending in xm.mark_step(): 12 steps, the
        # eval iterations steps of their own (xm.mark_step's @deprecated wrapper is no library caller)
        Card("corpus_xla_train_eval.py", "xla", 12, _at("corpus_xla_train_eval.py")),
        # torch.compile(openxla) and a short last batch: the forward and the backward graph compile
        # again; one card at the forward's line (the backward's compile names no user frame), which
        # torch_xla names as the frame dynamo resumes after its graph break at zero_grad
        Card(
            "corpus_xla_dynamo_ragged.py",
            "xla",
            13,
            _at("corpus_xla_dynamo_ragged.py", ("recompile", "region")),
        ),
        # a batch made on the device whose size grows once: 2 graphs, each compiled once, a bounded
        # set whose size shows in the graphs' outputs (their inputs have the same shapes)
        Card(
            "corpus_xla_device_batch.py",
            "xla",
            40,
            _at("corpus_xla_device_batch.py", ("recompile", "sync")),
        ),
    ]
}
PROGRAMS = list(CARDS)
# the corpus in two halves, one per test module (and xdist worker): the programs of sessions 1-8
# (tests/test_corpus.py) and session 9's idioms (tests/test_corpus_idioms.py)
FIRST_HALF = [
    p
    for p in PROGRAMS
    if p
    in {
        "corpus_xla_mnist.py",
        "corpus_xla_compile_loader.py",
        "corpus_xla_eager.py",
        "corpus_hf_generate.py",
        "corpus_hf_train.py",
        "corpus_hf_train_mask.py",
        "corpus_xla_encoder_head64.py",
        "corpus_xla_short_trailing.py",
        "corpus_jax_flax_mnist.py",
        "corpus_jax_shortbatch.py",
        "corpus_hf_varlen.py",
        "corpus_xla_fallback.py",
        "corpus_xla_quickstart_nosync.py",
    }
]
# issue 42's programs: tests/test_corpus_new_users.py
NEW_USERS = [
    p
    for p in PROGRAMS
    if p.startswith(
        ("corpus_xla_train_eval", "corpus_xla_dynamo_ragged", "corpus_xla_device_batch")
    )
]
SECOND_HALF = [p for p in PROGRAMS if p not in FIRST_HALF and p not in NEW_USERS]
JAX_PROGRAMS = [p for p, c in CARDS.items() if c.backend == "jax"]
TORCH_XLA_WORDS = (
    "torch_xla",
    "PJRT_DEVICE",
    "DataLoader(drop_last",
    "xm.",
    "mark_step",
    "PT_XLA",
    "MpDeviceLoader",
)


@dataclass
class CorpusRun:
    run_dir: Path
    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]  # `tpuscope show RUN --json`

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.report.get("findings", [])

    def pairs(self) -> set[Finding]:
        """(rule, line) of every finding but compile_time's: that card weighs how long this
        machine took to compile (docs/detectors.md, "Not a gate by default"), so whether a
        program gets it is not the program's; tests/test_compile_time.py checks it on runs of
        its own."""
        return {
            (f["rule"], _short(f.get("location")))
            for f in self.findings
            if f["rule"] not in ADVICE_RULES
        }


def _evidence(finding: dict[str, Any]) -> dict[str, Any]:
    evidence = finding.get("evidence") or {}
    return json.loads(evidence) if isinstance(evidence, str) else evidence


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
            proc = run_tpuscope(
                "run",
                "--store",
                str(corpus_store),
                "--name",
                name,
                "--quiet",
                "--alerts",
                "on",
                *card.tpuscope_args,
                "python",
                str(CORPUS / program),
                cwd=corpus_store.parent,
                env=dict(card.env) or None,
            )
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


def parametrize_programs(metafunc: pytest.Metafunc, programs: list[str]) -> None:
    """The generic tests of a module over its programs (`program`), JAX ones alone (`jax_program`)."""
    if "program" in metafunc.fixturenames:
        metafunc.parametrize("program", programs)
    if "jax_program" in metafunc.fixturenames:
        metafunc.parametrize("jax_program", [p for p in programs if CARDS[p].backend == "jax"])


# (b) the program runs unchanged under tpuscope ------------------------------------------------


def test_same_output_and_exit_with_tpuscope(
    program: str, truth: Callable[[str], Truth], corpus_run: Callable[[str], CorpusRun]
) -> None:
    plain, run = truth(program), corpus_run(program)
    assert run.proc.returncode == plain.returncode == 0, run.proc.stderr[-3000:]
    assert run.proc.stdout == plain.stdout
    assert run.report["summary"]["exit_code"] == 0


# (c) steps are the program's iterations ------------------------------------------------------


def test_steps_equal_iterations(program: str, corpus_run: Callable[[str], CorpusRun]) -> None:
    card = CARDS[program]
    assert corpus_run(program).report["summary"]["steps"] == (card.steps or card.iterations)


# (d) exactly the findings the truth implies ---------------------------------------------------


def test_exact_findings(program: str, corpus_run: Callable[[str], CorpusRun]) -> None:
    run = corpus_run(program)
    assert run.pairs() == CARDS[program].expected(), [f["title"] for f in run.findings]


_ALERTED = re.compile(
    r"^tpuscope: (?:step \d+: )?(?:(recompile) of (?:the graph from )?(?:\S+ at )?|new CPU "
    r"(fallback) \S+ at )(\S+:\d+) \("
)


def test_live_alerts_name_the_reports_recompiles_and_fallbacks(
    program: str, corpus_run: Callable[[str], CorpusRun]
) -> None:
    """`--alerts on`: one line per recompile site and fallback op of the report, at its line, and
    nothing for a program whose report has neither, nor for a bounded note (buckets)
    (tpuscope/launch/alerts/: the same rules and verdicts)."""
    run = corpus_run(program)
    said = [
        line
        for line in run.proc.stderr.splitlines()
        if re.match(r"tpuscope: (?:step \d+: )?(?:recompile of|new CPU fallback)", line)
    ]
    pairs = set()
    for line in said:
        match = _ALERTED.match(line)
        assert match, line
        pairs.add(("recompile" if match[1] else "cpu_fallback", _short(match[3])))
    assert len(pairs) == len(said), said  # once per problem
    # a bounded set of graphs (buckets) is the report's low note, never an alert (the same verdicts)
    expected = {
        (f["rule"], _short(f.get("location")))
        for f in run.findings
        if f["rule"] in ("recompile", "cpu_fallback") and _evidence(f).get("verdict") != "bounded"
    }
    # past MAX_NEW new problems per window, the printer folds the rest into one summing-up line
    # that names them ("2 more new problems (torchvision::nms, torchvision::roi_align; ...)")
    folded = [
        m
        for line in run.proc.stderr.splitlines()
        for m in re.findall(r"(\d+) more new problems? \((.*?); the report lists them\)", line)
    ]
    named = [label for _, labels in folded for label in labels.split(", ") if label != "..."]
    cards = json.dumps([f for f in run.findings if f["rule"] in ("recompile", "cpu_fallback")])
    assert all(label in cards for label in named), (named, said)
    assert pairs <= expected and len(pairs) + sum(int(n) for n, _ in folded) == len(expected), said


def test_jax_findings_say_nothing_of_torch_xla(
    jax_program: str, corpus_run: Callable[[str], CorpusRun]
) -> None:
    run = corpus_run(jax_program)
    assert run.report["summary"]["backend"] == "jax"
    text = json.dumps(run.findings)
    assert [w for w in TORCH_XLA_WORDS if w in text] == []
