"""Each rule on hand-built tables: what triggers it, what it says, what keeps it quiet.

Tables are built with the store's real schemas (pyarrow -> pandas, as a Run reads
them), so a column a detector relies on cannot silently be missing. Runs in < 2 s.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pyarrow as pa
import pytest

from tpuscope.analyze.shapes import diff_shapes, parse_shape, suggest_buckets, varying_dims
from tpuscope.detect import RunTables, detect
from tpuscope.detect.cpu_fallback import detect_cpu_fallback
from tpuscope.detect.host_sync import detect_host_sync
from tpuscope.detect.recompile import detect_recompile
from tpuscope.schema import TABLES
from tpuscope.store.run import table_to_frame

MS = 1_000_000
SITE = "/home/u/train.py:67"
PROC = {"host": "h", "pid": 1, "rank": 0}


def frame(name: str, rows: list[dict]) -> pd.DataFrame:
    return table_to_frame(pa.Table.from_pylist([{**PROC, **r} for r in rows], schema=TABLES[name]))


def steps(
    n: int,
    compiles: dict[int, int] | None = None,
    reads: int = 0,
    wall_ms: float = 100,
    compile_ms: float = 0,
) -> pd.DataFrame:
    compiles = compiles or {}
    return frame(
        "steps",
        [
            {
                "step": i,
                "start_ns": i * 10**9,
                "end_ns": i * 10**9 + int(wall_ms * MS),
                "wall_ns": int(wall_ms * MS),
                "boundary": "sync",
                "compiles": compiles.get(i, 0),
                "compile_ns": int(compile_ms * MS) * compiles.get(i, 0),
                "executions": 1,
                "execute_ns": MS,
                "fallback_ops": 0,
                "transfers_from_device": reads,
                "graph_hashes": [],
            }
            for i in range(n)
        ],
    )


def compile_row(
    step: int,
    shapes: list[str] | None,
    graph: str,
    ms: float = 500,
    location: str = SITE,
    cause: str = "user torch_xla.sync",
    **extra,
) -> dict:
    return {
        "step": step,
        "index": step,
        "time_ns": step * 10**9 + 1,
        "duration_ns": int(ms * MS),
        "graph_hash": graph,
        "cause": cause,
        "location": location,
        "frames": [],
        "num_inputs": len(shapes) if shapes else extra.pop("num_inputs", None),
        "input_shapes": shapes,
        "output_shapes": extra.pop("outputs", None),
        **extra,
    }


def tables(
    steps_frame: pd.DataFrame,
    compiles: list[dict] = (),
    fallbacks: list[dict] = (),
    metrics: list[dict] = (),
    call_sites: list[dict] = (),
    warmup: int = 2,
) -> RunTables:
    return RunTables(
        meta={"warmup": warmup},
        steps=steps_frame,
        compiles=frame("compiles", list(compiles)),
        fallbacks=frame("fallbacks", list(fallbacks)),
        metrics=frame("metrics", list(metrics)),
        extra={"call_sites": frame("call_sites", list(call_sites))},
    )


def static_run() -> RunTables:
    """The shape of a clean torch_xla loop: two warm-up compiles, then cached steps."""
    params = ["f32[512,32]", "f32[32]"]
    return tables(
        steps(10, {0: 1, 1: 1}, compile_ms=800),
        [
            compile_row(0, ["s64[8,65]", *params], "a"),
            compile_row(1, ["s64[8,65]", *params, "f32[512,32]", "f32[32]"], "b"),
        ],
    )


# -- judged steps --------------------------------------------------------------------------
def test_end_step_is_never_judged() -> None:
    frame_ = steps(5)
    frame_.loc[4, "boundary"] = "end"
    assert list(tables(frame_).judged["step"]) == [2, 3]


def test_a_short_run_keeps_its_last_step_judged() -> None:
    assert list(tables(steps(2)).judged["step"]) == [1]


# -- clean run -----------------------------------------------------------------------------
def test_clean_static_run_has_no_findings() -> None:
    """Two first compiles (the first step, then the step with optimizer state as inputs) are
    two graph families: no recompile, whatever the warm-up."""
    assert detect(static_run()) == []
    unjudged = static_run()
    unjudged.meta["warmup"] = 0
    assert detect(unjudged) == []


# -- recompile -----------------------------------------------------------------------------
def test_recompile_names_the_argument_that_changed() -> None:
    params = ["f32[512,32]", "f32[32]"]
    run = tables(
        steps(8, {0: 1, 1: 1, 5: 1}, compile_ms=500),
        [
            compile_row(0, ["f32[4,41,128]", *params], "a"),
            compile_row(1, ["f32[4,41,128]", *params, "f32[9]"], "b"),
            compile_row(5, ["f32[4,53,128]", *params, "f32[9]"], "c", ms=700),
        ],
    )
    [finding] = detect_recompile(run)
    assert finding.rule == "recompile" and finding.location == SITE
    assert finding.evidence["changes"] == ["arg 0: f32[4,41,128] -> f32[4,53,128]"]
    assert finding.evidence["compiles"][0]["against_graph"] == "b"  # closest graph, not the first
    assert (
        finding.step_runs == [[5, 5]]
        and finding.step_count == 1
        and finding.cost_s == pytest.approx(0.7)
    )
    assert "compile time" in finding.detail and "pad dim 1 of arg 0" in finding.fix
    assert finding.title == "1 recompile at train.py:67: dim 1 of arg 0 took 2 sizes"


def test_a_setup_graph_and_an_eval_graph_are_first_compiles() -> None:
    """Compiles late in the run from other lines or with another structure are not recompiles."""
    params = ["f32[512,32]", "f32[32]"]
    run = tables(
        steps(8, {0: 1, 1: 1, 6: 1}),
        [
            compile_row(0, ["f32[8,128]", *params], "a", location="/home/u/setup.py:9"),
            compile_row(1, ["f32[8,128]", *params], "b"),
            compile_row(6, ["f32[8,128]", *params], "c", location="/home/u/eval.py:30"),
        ],
    )
    assert detect_recompile(run) == []


def test_recompile_storm_is_one_high_finding() -> None:
    compiles = [
        compile_row(i, [f"s64[2,{8 + i}]", "f32[128,32]"], f"g{i}", ms=900) for i in range(10)
    ]
    [finding] = detect_recompile(
        tables(steps(10, {i: 1 for i in range(10)}, compile_ms=900), compiles)
    )
    assert finding.severity == "high"
    assert (
        finding.title
        == "Recompile storm at train.py:67: 9 of 10 steps compiled again (8.1 s compiling)"
    )
    assert finding.step_runs == [[1, 9]] and finding.step_count == 9
    assert finding.evidence["shape_churn"]["values"] == list(range(8, 18))
    assert set(finding.evidence["facets"]) == {"compile_time", "shape_churn", "storm"}
    assert finding.cost_s == pytest.approx(9 * 0.9)


def test_same_shapes_means_a_traced_constant() -> None:
    same = ["f32[8,16]", "f32[16]"]
    run = tables(
        steps(6, {0: 1, 4: 1}),
        [
            compile_row(0, same, "a", outputs=["f32[]"]),
            compile_row(4, same, "b", outputs=["f32[]"]),
        ],
    )
    [finding] = detect_recompile(run)
    assert finding.evidence["changes"] == ["same input and output shapes: the graph itself changed"]
    assert "torch.tensor(lr, device=device)" in finding.fix


def test_output_shapes_are_diffed_when_inputs_match() -> None:
    run = tables(
        steps(6, {0: 1, 4: 1}),
        [
            compile_row(0, ["s64[]"], "a", outputs=["f32[3,5]"]),
            compile_row(4, ["s64[]"], "b", outputs=["f32[3,7]"]),
        ],
    )
    assert detect_recompile(run)[0].evidence["changes"] == ["output 0: f32[3,5] -> f32[3,7]"]


def test_recompile_without_shapes_uses_pt_xla_debug_counts() -> None:
    run = tables(
        steps(6, {0: 1, 4: 1}),
        [
            compile_row(0, None, "a", num_inputs=25, input_gb=0.0002),
            compile_row(
                4,
                None,
                "b",
                num_inputs=25,
                input_gb=0.0003,
                cause="most likely user code trying to access tensor value before torch_xla.sync",
            ),
        ],
    )
    [finding] = detect_recompile(run)
    assert "graph input size 0.200 MB -> 0.300 MB" in finding.evidence["changes"][0]
    assert "--deep" in finding.evidence["changes"][0]
    assert "Move the read after torch_xla.sync()" in finding.fix


def test_imported_compile_counts_make_a_storm() -> None:
    metrics = [
        {"step": -1, "name": "CompileTime", "kind": "metric", "count": 23, "total": 0.0},
        {"step": -1, "name": "MarkStep", "kind": "counter", "count": 12, "total": 0.0},
    ]
    run = tables(frame("steps", []), metrics=metrics, warmup=0)
    [finding] = detect_recompile(run)
    # no wall time and no compile time (total 0.0): medium, never a high card that costs 0.00 s
    assert (
        finding.title == "Recompile storm: 23 compiles in 12 steps" and finding.severity == "medium"
    )


# -- shape_churn ---------------------------------------------------------------------------
def churn_run(lengths: list[int]) -> RunTables:
    compiles = [
        compile_row(i, [f"s64[4,{n}]", f"s64[4,{n}]", "f32[128,32]"], f"g{i}", ms=1000)
        for i, n in enumerate(lengths)
    ]
    return tables(steps(len(lengths) + 4, {i: 1 for i in range(len(lengths))}), compiles)


def test_shape_churn_is_a_facet_of_the_recompile_with_a_bucket_plan() -> None:
    [finding] = detect_recompile(churn_run([38, 42, 46, 54, 59, 65]))
    ev = finding.evidence["shape_churn"]
    assert (ev["arg"], ev["dim"], ev["values"]) == (0, 1, [38, 42, 46, 54, 59, 65])
    assert ev["linked_dims"] == [[0, 1], [1, 1]]  # input_ids and labels move together
    assert ev["buckets"] == [46, 65] and ev["padding_waste"] <= 0.10
    assert "pad to {46, 65}, 2 graphs instead of 6, 9% padding" in finding.detail
    assert ev["saved_s"] == pytest.approx(4 * 1.0)  # 6 graphs - 2 buckets, 1 s each
    assert finding.cost_s == pytest.approx(5 * 1.0)  # the 5 recompiles, measured


def test_two_sizes_pad_to_the_larger_or_drop_the_short_batch() -> None:
    compiles = [
        compile_row(i, [f"f32[{n},64]", "f32[64,10]"], f"g{i}") for i, n in enumerate([32, 8])
    ]
    # 3 steps: the second size came at the end of the loop (6 steps would show a bounded set: buckets)
    [finding] = detect_recompile(tables(steps(3, {0: 1, 1: 1}), compiles))
    assert "plan" not in finding.evidence["shape_churn"]
    assert "the largest, 32" in finding.fix and "drop_last=True" in finding.fix


def test_different_signatures_are_different_programs() -> None:
    # not in three steps in a row: a line whose graph changes every step is a recompile
    # (test_recompile_verdicts: a line whose graph changes every step)
    run = tables(
        steps(6, {0: 1, 1: 1, 3: 1}),
        [
            compile_row(0, ["s64[4,38]"], "a"),
            compile_row(1, ["s64[4,42]", "f32[9]"], "b"),
            compile_row(3, ["f32[4,46]"], "c"),
        ],
    )
    assert detect_recompile(run) == []


def test_data_dependent_index_lengths_point_at_the_fallback() -> None:
    run = churn_run([14, 15, 16])
    run.fallbacks = frame(
        "fallbacks", [{"step": 3, "op": "aten::nonzero", "count": 2, "location": None}]
    )
    [finding] = detect_recompile(run)
    assert "aten::nonzero" in finding.fix and "instead of bucketing" in finding.fix


def test_recompiles_without_shapes_use_input_sizes() -> None:
    compiles = [
        compile_row(i, None, f"g{i}", num_inputs=25, input_gb=0.001 * (i + 1)) for i in range(4)
    ]
    # 5 steps: still recompiling at the end of the loop (8 steps would make the 4 graphs a bounded set)
    [finding] = detect_recompile(tables(steps(5, {i: 1 for i in range(4)}), compiles))
    assert "graph input size" in finding.evidence["changes"][0] and "--deep" in finding.detail


# -- cpu_fallback --------------------------------------------------------------------------
def fallback_rows(n_steps: int, op: str, per_step: int, location: str | None = None) -> list[dict]:
    return [
        {"step": i, "op": op, "count": per_step, "location": location if i == 1 else None}
        for i in range(n_steps)
    ]


def test_cpu_fallback_per_op_with_site_alternative_and_cost() -> None:
    where = "/home/u/loss.py:23"
    rows = fallback_rows(6, "aten::nonzero", 2, where) + fallback_rows(
        6, "aten::_local_scalar_dense", 1
    )
    metrics = [
        {"step": i, "name": "TransferFromDeviceTime", "kind": "metric", "count": 3, "total": 3e6}
        for i in range(6)
    ]
    [finding] = detect_cpu_fallback(tables(steps(6, reads=3), fallbacks=rows, metrics=metrics))
    assert finding.rule == "cpu_fallback" and finding.evidence["op"] == "aten::nonzero"
    assert (
        finding.evidence["per_step"] == 2.0
        and finding.step_runs == [[0, 5]]
        and finding.step_count == 6
    )
    assert finding.location == where and finding.evidence["sites"][0]["per_traced_step"] == 2
    assert "torch.where(mask, x, 0)" in finding.fix
    assert finding.cost_s == pytest.approx(6 * 3e6 * 2 / 3 / 1e9)  # 2 of 3 reads, every step


def test_a_fallback_inside_a_library_names_the_library_line_that_called_the_op() -> None:
    """The op was called by a model's code inside the user's forward call: the card keeps
    the user's line and names the library line (pvt interpolating its position embeddings)."""
    user, library = "/home/u/train.py:38", "transformers/models/pvt/modeling_pvt.py:120"
    rows = [
        {**row, "library_frame": library if row["location"] else None}
        for row in fallback_rows(4, "aten::upsample_bilinear2d_backward", 4, user)
    ]
    [finding] = detect_cpu_fallback(tables(steps(4), fallbacks=rows))
    assert finding.location == user
    assert finding.title == (
        "aten::upsample_bilinear2d_backward runs on the CPU (4.0 per step) "
        f"at train.py:38, inside {library}"
    )
    assert f"Called from: train.py:38, inside {library} (4 per step)" in finding.detail
    assert finding.evidence["sites"][0]["inside"] == [{"frame": library, "count": 4}]


def test_a_fallback_in_setup_is_still_a_fallback_priced_by_its_cost() -> None:
    rows = [{"step": 0, "op": "aten::median", "count": 1, "location": None}]
    metrics = [
        {"step": 0, "name": "TransferFromDeviceTime", "kind": "metric", "count": 1, "total": 1e5}
    ]
    [finding] = detect_cpu_fallback(tables(steps(5), fallbacks=rows, metrics=metrics))
    assert finding.step_runs == [[0, 0]] and finding.severity == "low"  # 0.1 ms of 0.5 s


def test_unknown_op_gets_the_generic_advice() -> None:
    [finding] = detect_cpu_fallback(
        tables(steps(4), fallbacks=fallback_rows(4, "aten::weird_op", 1))
    )
    assert finding.evidence["alternative"] is None and "move it out of the step" in finding.fix


def test_fallbacks_outside_aten_are_cards_with_their_own_fix() -> None:
    """torchvision's ops and torch.library custom ops fall back like aten ones (issue 26)."""
    nms, custom = "/home/u/detect.py:73", "/home/u/model.py:53"
    rows = fallback_rows(4, "torchvision::nms", 1, nms) + fallback_rows(
        4, "corpus_ops::numpy_tanh", 1, custom
    )
    found = {
        f.evidence["op"]: f for f in detect_cpu_fallback(tables(steps(4, reads=2), fallbacks=rows))
    }
    assert (
        found["torchvision::nms"].location == nms
        and "XLA_EXPERIMENTAL=nms" in found["torchvision::nms"].fix
    )
    tanh = found["corpus_ops::numpy_tanh"]
    assert tanh.location == custom and tanh.evidence["per_step"] == 1.0
    assert "custom op" in tanh.detail and '@numpy_tanh.register_kernel("xla")' in tanh.fix


def test_one_op_at_two_lines_is_at_the_first_line_called_on_a_tie() -> None:
    first, second = (
        "/home/u/post.py:71",
        "/home/u/post.py:69",
    )  # the tracer's call order: 71 ran first
    rows = [
        {"step": 1, "op": "aten::nonzero", "count": 1, "location": first},
        {"step": 1, "op": "aten::nonzero", "count": 1, "location": second},
    ]
    [finding] = detect_cpu_fallback(tables(steps(3), fallbacks=rows))
    assert finding.location == first and [s["location"] for s in finding.evidence["sites"]] == [
        first,
        second,
    ]


# -- host_sync -----------------------------------------------------------------------------
def test_host_sync_counts_reads_not_caused_by_fallbacks() -> None:
    item_site, mask_site = "/home/u/train.py:49", "/home/u/loss.py:23"
    fallbacks = fallback_rows(6, "aten::nonzero", 3, mask_site) + fallback_rows(
        6, "aten::_local_scalar_dense", 1
    )
    calls = [
        {"step": 3, "kind": "host_sync", "name": "item", "location": item_site, "count": 1},
        {"step": 3, "kind": "host_sync", "name": "__getitem__", "location": mask_site, "count": 3},
    ]
    fallbacks[1]["location"] = fallbacks[9]["location"] = None
    fallbacks[3] = {**fallbacks[3], "location": mask_site}
    [finding] = detect_host_sync(tables(steps(6, reads=4), fallbacks=fallbacks, call_sites=calls))
    assert finding.evidence["reads_per_step"] == 1.0
    assert finding.location == item_site and finding.evidence["sites"][0]["calls"] == ["item"]
    assert finding.title == "1.0 device-to-host reads per step (item at train.py:49)"


def test_a_read_inside_a_library_names_the_library_line_that_made_it() -> None:
    """A read the user's line did not make itself (a model's forward reading its padding mask):
    the card keeps the user's line and names the library lines inside it, most reads first."""
    site = "/home/u/train.py:37"
    calls = [
        {
            "step": s,
            "kind": "host_sync",
            "name": name,
            "location": site,
            "count": n,
            "library_frame": frame,
        }
        for s in range(6)
        for name, n, frame in (
            ("__bool__", 3, "transformers/masking_utils.py:354"),
            ("item", 1, "transformers/models/x/modeling_x.py:88"),
        )
    ]
    [finding] = detect_host_sync(tables(steps(6, reads=4), call_sites=calls))
    assert finding.location == site
    assert finding.title == (
        "4.0 device-to-host reads per step "
        "(__bool__ at train.py:37, inside transformers/masking_utils.py:354)"
    )
    assert (
        "(4 per traced step; inside transformers/masking_utils.py:354 (__bool__), "
        "transformers/models/x/modeling_x.py:88 (item))" in finding.detail
    )
    assert finding.evidence["sites"][0]["inside"][0] == {
        "call": "__bool__",
        "frame": "transformers/masking_utils.py:354",
        "count": 18,
    }


def test_the_reads_a_torchvision_fallback_makes_are_not_host_syncs() -> None:
    """torchvision::nms copies its inputs to the host once per call: the fallback's read, not a sync."""
    site = "/home/u/detect.py:73"
    rows = fallback_rows(6, "torchvision::nms", 1, site)
    calls = [{"step": 1, "kind": "host_sync", "name": "nms", "location": site, "count": 1}]
    assert detect_host_sync(tables(steps(6, reads=1), fallbacks=rows, call_sites=calls)) == []


def test_a_read_every_few_steps_is_fine() -> None:
    frame_ = steps(10)
    frame_.loc[frame_["step"] == 5, "transfers_from_device"] = 1
    assert detect_host_sync(tables(frame_)) == []


def test_many_reads_in_a_few_steps_are_reads_every_n_steps() -> None:
    """Two metrics reads every 100 steps and a checkpoint's 430 reads after the last step (flax's
    imagenet example): 2.2 reads a step on the mean, in 2 of 200 steps: what the fix asks for,
    no card. The same reads spread over most steps are one."""
    frame_ = steps(200)
    frame_.loc[frame_["step"] == 99, "transfers_from_device"] = 2
    frame_.loc[frame_["step"] == 199, "transfers_from_device"] = 432
    assert detect_host_sync(tables(frame_)) == []
    frame_["transfers_from_device"] = (frame_["step"] % 2 == 0).astype(int) * 3
    [finding] = detect_host_sync(tables(frame_))
    assert finding.evidence["reads_per_step"] == 1.5


def test_one_rank_reading_every_step_of_a_pod_reads_in_every_step() -> None:
    """Four processes, rank 0 alone reading its loss 4 times a step (the master logs): a read
    in every step, though in a quarter of the (process, step) rows."""
    ranks = [steps(10, reads=4 if pid == 0 else 0).assign(host="h", pid=pid) for pid in range(4)]
    [finding] = detect_host_sync(tables(pd.concat(ranks, ignore_index=True)))
    assert finding.evidence["reads_per_step"] == 1.0


def test_reads_in_a_loop_with_no_step_marker_get_no_rate_per_iteration() -> None:
    """No sync, no optimizer step (an inference loop of `.item()` reads): the whole program is
    one step, so the card counts the reads and the graph runs, never a rate per step."""
    frame_ = steps(1, compiles={0: 1}, reads=8).assign(boundary="end", executions=8)
    [finding] = detect_host_sync(tables(frame_))
    assert finding.title == "8 device-to-host reads in a loop with no step marker"
    assert "is not known" in finding.detail and "graphs ran 8 times" in finding.detail
    assert finding.evidence.unmarked_runs == 8


# -- shapes --------------------------------------------------------------------------------
def test_parse_and_diff_shapes() -> None:
    assert parse_shape("f32[4,41,128]{2,1,0}").dims == (4, 41, 128)
    assert str(parse_shape("pred[]")) == "pred[]"
    assert parse_shape("(f32[2], s32[])") is None
    assert diff_shapes(["a[1]", "b[2]", "c[3]"], ["a[1]", "x[9]", "b[2]", "c[3]"]) == [
        "arg 1 added: x[9]",
        "3 -> 4 args",
    ]


def test_varying_dims_only_within_one_signature() -> None:
    dims = varying_dims([["f32[4,10]", "s64[]"], ["f32[4,12]", "s64[]"], ["f32[4,10]", "s64[]"]])
    assert [(d.arg, d.dim, d.distinct) for d in dims] == [(0, 1, [10, 12])]
    assert varying_dims([["f32[4,10]"], ["f32[4,12]", "s64[]"]]) == []


@pytest.mark.parametrize(
    "values",
    [
        [38, 42, 46, 54, 59, 65],
        [8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
        [100, 101, 250, 251, 400],
        [7, 300],
    ],
)
def test_bucket_plan_is_the_fewest_buckets_under_the_bound(values: list[int]) -> None:
    plan = suggest_buckets(values, max_waste=0.10)
    assert plan.waste <= 0.10 and plan.buckets[-1] >= max(values)
    for k in range(1, len(plan.buckets)):  # no plan with fewer buckets meets the bound
        for cut in itertools.combinations(sorted(set(values)), k):
            if max(cut) < max(values):
                continue
            padded = [min(b for b in cut if b >= v) for v in values]
            assert (sum(padded) - sum(values)) / sum(padded) > 0.10
