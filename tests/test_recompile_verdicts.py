"""The recompile verdict by graph identity and recurrence (analyze/families.py, detect/recompile.py).

Hand-built tables in the shape the torch_xla collector writes; the real programs behind each case
are in the corpus (tests/corpus/: generate() with a static cache, xm.mesh_reduce, a bucketing
collate_fn). Pure and fast: no runtime is started.
"""

from __future__ import annotations

from tests.test_detectors import compile_row, steps, tables
from tpuscope.analyze.gate import Policy, reasons
from tpuscope.analyze.summary import summarize
from tpuscope.detect.recompile import detect_recompile

PARAMS = ["f32[512,32]", "f32[32]"]


def verdicts(run) -> list[tuple[str, str | None]]:
    fam = run.families
    return [(v, None if r != r else r) for v, r in zip(fam["verdict"], fam["reason"], strict=True)]


def test_distinct_graphs_in_one_step_are_warm_up() -> None:
    """A library cutting several graphs at one line in one pass (shapes unknown): not recompiles."""
    compiles = [
        compile_row(
            0,
            None,
            f"g{i}",
            num_inputs=1,
            num_outputs=1,
            cause="most likely user code trying to access tensor value",
        )
        for i in range(3)
    ]
    run = tables(steps(1), compiles)
    assert verdicts(run) == [("first", None), ("warmup", None), ("warmup", None)]
    assert detect_recompile(run) == []


def test_the_same_hash_compiled_again_is_an_evicted_recompile() -> None:
    compiles = [compile_row(0, None, "a", num_inputs=3), compile_row(4, None, "a", num_inputs=3)]
    run = tables(steps(40), compiles)
    assert verdicts(run)[1] == ("recompile", "evicted")
    [card] = detect_recompile(run)
    assert "compile cache lost it" in card.detail


def test_new_graphs_that_keep_coming_are_a_storm_high_by_the_whole_runs_share() -> None:
    compiles = [
        compile_row(i, [f"s64[4,{40 + i}]", *PARAMS], f"g{i}", ms=900) for i in range(0, 10, 2)
    ]
    run = tables(steps(10, wall_ms=1000), compiles)
    [card] = detect_recompile(run)
    assert card.severity == "high" and card.evidence["recurring"] is True
    assert 0 < card.evidence["share"] <= 1 and "per 1,000 steps" in card.detail
    assert card.step_runs == [[2, 2], [4, 4], [6, 6], [8, 8]]


def test_buckets_are_a_low_note_that_fail_on_recompile_passes() -> None:
    compiles = [
        compile_row(0, ["s64[4,48]", *PARAMS], "b48", ms=20_000),
        compile_row(1, ["s64[4,64]", *PARAMS], "b64", ms=20_000),
    ]
    run = tables(steps(12, wall_ms=30), compiles)
    [note] = detect_recompile(run)
    assert (
        note.severity == "low"
        and note.evidence["verdict"] == "bounded"
        and "{48, 64}" in note.title
    )
    summary = summarize({"warmup": 2}, run.step_sql, run.families, run.fallbacks)
    assert summary["recompiles"] == 0
    assert reasons(summary, [note], Policy(fail_on=("recompile",))) == []


def test_a_bounded_set_without_shapes_says_so_and_is_at_most_medium() -> None:
    compiles = [compile_row(i, None, f"g{i}", num_inputs=19, ms=20_000) for i in range(2)]
    [note] = detect_recompile(tables(steps(12, wall_ms=30), compiles))
    assert (
        note.severity == "medium"
        and "shapes unknown" in note.title
        and "TPUSCOPE_HLO_SHAPES=1" in note.fix
    )


def test_sizes_a_plan_would_cut_are_churn_even_when_the_set_stopped() -> None:
    lengths = [37, 41, 45, 53, 58, 64]
    compiles = [
        compile_row(i, [f"s64[4,{n}]", *PARAMS], f"g{i}", ms=3000) for i, n in enumerate(lengths)
    ]
    [card] = detect_recompile(tables(steps(12, wall_ms=40), compiles))
    assert card.evidence["verdict"] == "recompile" and card.evidence["recurring"] is False
    assert "one-off" in card.detail and card.evidence["shape_churn"]["plan"]


def test_recompiles_not_seen_again_for_too_few_steps_are_not_said_to_recur() -> None:
    """A first request that churned (MoE routing sizes), then one quiet step (zoo longcat_flash
    generate): neither 'still recurring' (the last step compiled nothing) nor 'one-off'."""
    compiles = [compile_row(0, [f"s64[{n},1]", *PARAMS], f"g{n}", ms=40) for n in (1, 2, 5, 3, 4)]
    [card] = detect_recompile(tables(steps(2, wall_ms=700), compiles))
    assert card.evidence["quiet_steps"] == 1 and card.evidence["recurring"] is True
    assert "still recurring" not in card.detail and "one-off" not in card.detail
    assert "none in the 1 step(s) after step 0, too few to tell whether they recur" in card.detail


def test_no_cause_is_claimed_without_both_shapes() -> None:
    """'a Python number traced as a constant' only when input and output shapes are known and equal."""
    same = ["s64[4,8]", *PARAMS]
    unknown_out = [compile_row(i, same, f"g{i}") for i in range(0, 6, 2)]
    [card] = detect_recompile(tables(steps(6), unknown_out))
    assert "Python number" not in card.fix and "not known" in card.detail
    known_out = [compile_row(i, same, f"g{i}", outputs=["f32[4,8]"]) for i in range(0, 6, 2)]
    [card] = detect_recompile(tables(steps(6), known_out))
    assert "Python number" in card.fix
    no_shapes = [compile_row(i, None, f"g{i}", num_inputs=3) for i in range(0, 6, 2)]
    [card] = detect_recompile(tables(steps(6), no_shapes))
    assert "Python number" not in card.fix and "--deep" in card.fix


def test_imported_logs_count_a_sync_as_a_step() -> None:
    """A PT_XLA_DEBUG log has no steps: a compile made at a sync ends one; value reads do not."""
    synced = [compile_row(-1, None, f"s{i}", num_inputs=5) for i in range(3)]
    assert [v for v, _ in verdicts(tables(steps(0), synced))] == ["first", "recompile", "recompile"]
    read = [
        compile_row(
            -1,
            None,
            f"r{i}",
            num_inputs=5,
            cause="most likely user code trying to access tensor value before torch_xla.sync",
        )
        for i in range(3)
    ]
    assert [v for v, _ in verdicts(tables(steps(0), read))] == ["first", "warmup", "warmup"]


def test_a_recompile_costing_more_than_the_timed_steps_is_still_a_share() -> None:
    compiles = [
        compile_row(0, ["s64[4,8]", *PARAMS], "a", ms=50_000),
        compile_row(1, ["s64[4,9]", *PARAMS], "b", ms=50_000),
    ]
    run = tables(steps(3, wall_ms=20), compiles)
    summary = summarize({"warmup": 2}, run.step_sql, run.families, run.fallbacks)
    assert 0 < summary["recompile_share"] <= 1
    assert all(0 <= f.evidence["share"] <= 1 for f in detect_recompile(run))


def test_a_line_whose_graph_changes_every_step_recompiles_from_the_third_step() -> None:
    """zoo sew `train` (audio-cls, real counters: uncached [2, 2, 2, 2]): LayerDrop skips layers
    at random, so the sync line's graph has another input count every step (68, 162, 180, 212
    inputs): each is a new family, none recurs. The first step and the optimizer's first are
    the loop's two transitions; from the third new graph in a row the line is recompiling."""
    counts = [(68, 145), (162, 145), (180, 193), (212, 193)]
    compiles = [
        compile_row(i, None, f"g{i}", num_inputs=n, num_outputs=out)
        for i, (n, out) in enumerate(counts)
    ]
    run = tables(steps(4), compiles)
    assert verdicts(run) == [
        ("first", None),
        ("first", None),
        ("recompile", "new graph every step"),
        ("recompile", "new graph every step"),
    ]
    [card] = detect_recompile(run)
    assert card.step_runs == [[2, 3]] and "162 -> 180 graph inputs" in card.detail
    assert "never compiled in each of the last 3 steps" in card.detail
    # the usual loop: the step's graph, the optimizer's first step, then the cache: no card
    usual = [compile_row(i, None, f"g{i}", num_inputs=n) for i, n in enumerate((68, 162))]
    assert detect_recompile(tables(steps(4), usual)) == []


def test_a_size_made_inside_the_graph_is_named_from_its_outputs() -> None:
    """The default mode records each graph's inputs and outputs: with the inputs the same, the
    note names the outputs' varying dim and sends nobody to --deep (real program:
    tests/corpus/corpus_xla_device_batch.py)."""
    compiles = [
        compile_row(i, PARAMS, f"g{n}", outputs=[f"f32[{n},32]", "f32[]"], ms=20_000)
        for i, n in ((0, 16), (3, 24))
    ]
    [note] = detect_recompile(tables(steps(40, wall_ms=30), compiles))
    assert note.evidence["verdict"] == "bounded" and note.severity == "low"
    assert "output 0 dim 0 in {16, 24}" in note.title and "same input shapes" in note.detail
    assert "--deep" not in note.detail + note.fix and "shapes unknown" not in note.title


def test_graphs_whose_recorded_shapes_are_the_same_say_so_not_run_deep() -> None:
    compiles = [compile_row(i, PARAMS, f"g{i}", outputs=["f32[]"], ms=20_000) for i in (0, 3)]
    [note] = detect_recompile(tables(steps(40, wall_ms=30), compiles))
    assert "same input and output shapes" in note.title and "--deep" not in note.detail + note.fix


def test_a_recompile_inside_the_graph_is_not_told_to_fix_its_inputs() -> None:
    """Sizes that keep changing inside the graph (its inputs the same): a recompile card whose fix
    is about the size made in the step, not the input shapes."""
    compiles = [
        compile_row(i, PARAMS, f"g{i}", outputs=[f"f32[{16 + 8 * i},32]"], ms=900)
        for i in range(0, 10, 2)
    ]
    [card] = detect_recompile(tables(steps(10, wall_ms=1000), compiles))
    assert card.evidence["verdict"] == "recompile" and "output 0:" in card.detail
    assert "made inside the step" in card.fix and "Keep input shapes fixed" not in card.fix
