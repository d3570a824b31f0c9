"""The corpus's programs of issue 42: what a new user met, each a real program with its measured
truth and exact findings (the machinery and the method: tests/corpus_suite.py, tests/test_corpus.py).

- corpus_xla_train_eval.py: eval iterations ending in `xm.mark_step()` are steps of their own;
- corpus_xla_dynamo_ragged.py: torch.compile's short last batch is one recompile card, at the
  forward's line, not a second one at no line for the backward graph;
- corpus_xla_device_batch.py: a size made inside the graph is read from the graphs' recorded
  shapes (their outputs), never "shapes unknown, run --deep"; the header counts graphs as the
  card does; with `--deep`, a tensorcore_underuse card costing microseconds is low.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuscope
from tests.corpus.truth import CORPUS, Truth, where
from tests.corpus_suite import (  # noqa: F401 (the session fixtures and the tests every program gets)
    NEW_USERS,
    CorpusRun,
    corpus_run,
    corpus_store,
    parametrize_programs,
    test_exact_findings,
    test_live_alerts_name_the_reports_recompiles_and_fallbacks,
    test_same_output_and_exit_with_tpuscope,
    test_steps_equal_iterations,
    truth,
)
from tpuscope.store.parts import read_table

pytestmark = pytest.mark.slow

PROGRAMS = NEW_USERS
TRAIN_EVAL = "corpus_xla_train_eval.py"
RAGGED = "corpus_xla_dynamo_ragged.py"
DEVICE_BATCH = "corpus_xla_device_batch.py"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_programs(metafunc, PROGRAMS)


def _text(finding: dict[str, Any]) -> str:
    return " ".join(str(finding.get(k) or "") for k in ("title", "detail", "fix"))


# --- eval iterations are steps -----------------------------------------------------------------


def test_truth_train_eval_marks_a_step_in_every_iteration(truth: Callable[[str], Truth]) -> None:
    t = truth(TRAIN_EVAL)
    assert t.extra["iterations"] == 12
    assert t.per_phase("MarkStep", "train:") == [1] * 8
    assert t.per_phase("MarkStep", "eval:") == [1] * 4
    # the eval graph compiles in epoch 1's first eval iteration only
    assert t.per_phase("UncachedCompile", "eval:") == [1, 0, 0, 0]


def test_eval_iterations_are_steps_of_their_own(corpus_run: Callable[[str], CorpusRun]) -> None:
    """Each of the 12 steps launched the one graph of its iteration: no eval iteration is folded
    into a training step (which would carry 3 graphs and its time)."""
    run = corpus_run(TRAIN_EVAL)
    steps = read_table(run.run_dir, "steps").to_pandas().sort_values("step")
    loop = steps[steps["boundary"] != "end"]
    assert list(loop["boundary"]) == ["mark_step"] * 12
    assert list(loop["executions"]) == [1] * 12
    # the eval graph's one compile is in the first eval iteration's step: epoch 1's 5th step
    assert list(loop["compiles"]) == [1, 1, 0, 0, 1] + [0] * 7


# --- torch.compile and a short last batch: one card ------------------------------------------


def test_truth_short_batch_compiles_forward_and_backward_again(
    truth: Callable[[str], Truth],
) -> None:
    t = truth(RAGGED)
    compiles = t.per_phase("UncachedCompile", "train:")
    assert t.extra["iterations"] == 13 and compiles[-1] == 2 and compiles[1:-1] == [0] * 11


def test_short_batch_is_one_recompile_card_at_the_forwards_line(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    run = corpus_run(RAGGED)
    [card] = [f for f in run.findings if f["rule"] == "recompile"]
    evidence = card["evidence"]
    assert card["location"].endswith(where(RAGGED, "region"))
    assert evidence["recompiles"] == 2  # the forward's graph and its backward's
    assert "dim 0 of arg 3" in card["title"]  # the forward's data argument, as "what changed" says
    assert all(f.get("location") for f in run.findings)
    # every compile the backward pass made is at the forward's line, none at no line
    compiles = read_table(run.run_dir, "compiles").to_pandas()
    backward = compiles[compiles["frames"].map(lambda f: any("_backward_impl" in x for x in f))]
    line = where(RAGGED, "region").rsplit(":", 1)[1]
    assert len(backward) >= 2 and set(backward["location"]) == {f"{CORPUS / RAGGED}:{line}"}


# --- a size made inside the graph ----------------------------------------------------------------


def test_truth_device_batch_compiles_when_the_size_changes(truth: Callable[[str], Truth]) -> None:
    t = truth(DEVICE_BATCH)
    compiles = t.per_phase("UncachedCompile", "train:")
    assert [i for i, n in enumerate(compiles) if n] == [
        0,
        t.extra["grow_at"],
    ]  # plain SGD: no state


def test_a_size_inside_the_graph_is_read_from_its_outputs(
    corpus_run: Callable[[str], CorpusRun],
) -> None:
    """The default mode recorded every graph's shapes: the note says what differs (output 0's dim 0,
    16 then 24; the inputs are the same) and never sends the user to --deep, which adds nothing."""
    run = corpus_run(DEVICE_BATCH)
    [note] = run.findings
    assert note["evidence"]["verdict"] == "bounded" and note["severity"] == "low"
    assert "output 0 dim 0 in {16, 24}" in note["title"]
    assert "same input shapes" in note["detail"]
    assert not re.search(r"--deep|TPUSCOPE_HLO_SHAPES|shapes unknown|not known", _text(note))


def test_the_header_counts_graphs_as_the_card_does(
    corpus_run: Callable[[str], CorpusRun], corpus_store: Path
) -> None:
    run = corpus_run(DEVICE_BATCH)
    [note] = run.findings
    summary = run.report["summary"]
    assert summary["graphs"] == note["evidence"]["graphs"] == 2
    assert summary["graph_families"] == 1
    shown = run_tpuscope("show", "--store", str(corpus_store), run.run_dir.name)
    assert "of 2 graph(s) in 1 family" in shown.stdout
    assert f"{note['evidence']['graphs']} bucket graphs" in shown.stdout


@pytest.fixture(scope="session")
def device_batch_deep(corpus_store: Path) -> CorpusRun:
    proc = run_tpuscope(
        "run",
        "--store",
        str(corpus_store),
        "--name",
        "deep-device-batch",
        "--quiet",
        "--deep",
        "python",
        str(CORPUS / DEVICE_BATCH),
        cwd=corpus_store.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = [p for p in corpus_store.iterdir() if p.name.startswith("deep-device-batch-")]
    shown = run_tpuscope("show", "--store", str(corpus_store), run_dir.name, "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    return CorpusRun(run_dir, proc, json.loads(shown.stdout))


def test_a_tensorcore_card_costing_microseconds_is_low(device_batch_deep: CorpusRun) -> None:
    """Its f32 matmuls are a real share of their tiny graph's estimated time, but their cost over
    the run is microseconds in seconds of steps: severity follows that, as for every rule."""
    [card] = [f for f in device_batch_deep.findings if f["rule"] == "tensorcore_underuse"]
    share_of_graph = card["evidence"]["share_of_step"]
    assert share_of_graph >= 0.01  # reported: above the rule's threshold in its graph
    assert card["cost_s"] < 1e-3 and card["severity"] == "low"
    [note] = [f for f in device_batch_deep.findings if f["rule"] == "recompile"]
    assert "--deep" not in _text(note)


def test_each_backward_is_at_its_own_regions_line(tmp_path: Path) -> None:
    """Two compiled regions (a graph break): autograd runs their backwards in reverse order, and
    each backward's compiles (first and again at the short batch) are at its own region's line."""
    program = Path(__file__).parent / "programs" / "dynamo_regions.py"
    proc = run_tpuscope("run", "--store", str(tmp_path), "--quiet", "python", str(program))
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    lines = {
        tag: f"{program}:{n}"
        for n, text in enumerate(program.read_text().splitlines(), 1)
        for tag in ("region A", "region B")
        if text.endswith(f"# {tag}")
    }
    compiles = read_table(run_dir, "compiles").to_pandas().sort_values("index")
    backward = compiles[compiles["frames"].map(lambda f: any("_backward_impl" in x for x in f))]
    graphs = backward[backward["cause"] == "dynamo is compiling a FX graph to HLO"]
    assert list(graphs["location"]) == [lines["region B"], lines["region A"]] * 2
    report = json.loads(
        run_tpuscope("show", "--store", str(tmp_path), run_dir.name, "--json").stdout
    )
    assert sorted(f["location"] for f in report["findings"]) == sorted(lines.values())
