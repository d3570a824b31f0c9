"""The TPU cost model against the two real TPU profiles: estimates within 2x of measured op time.

v6e: `tpu_inference_2.xplane.pb` (4 chips, host-offload copies, an all-reduce), imported
whole (trace events, HLO protos of its metadata plane, xprof's analyses). v5p: xprof's
tool outputs of a JAX training profile (`xprof_golden_tpu_training/`). The figures asserted
are the ones the model reaches (docs/cost_model.md); "roofline" is the formula tpuscope used
before, max(FLOPs / chip peak, bytes / chip HBM) with XLA's counts.
"""

from __future__ import annotations

import gzip
import json
import subprocess

import pytest

from tests.conftest import real_trace, tpuscope_cmd
from tpuscope.analyze import cost_model as cm
from tpuscope.ingest import import_paths
from tpuscope.report.cost import cost_view
from tpuscope.store import Run, RunStore

V6E = "xplane/tpu_inference_2.xplane.pb"
V5 = "xplane/xprof_golden_tpu_training"


@pytest.fixture(scope="module")
def v6e(tmp_path_factory: pytest.TempPathFactory) -> Run:
    result = import_paths([real_trace(V6E)], RunStore(tmp_path_factory.mktemp("v6e")), name="v6e")
    return Run(result.run_dir)


@pytest.fixture(scope="module")
def v5(tmp_path_factory: pytest.TempPathFactory) -> Run:
    result = import_paths([real_trace(V5)], RunStore(tmp_path_factory.mktemp("v5")), name="v5")
    return Run(result.run_dir)


def _op(view: dict, name: str) -> dict:
    return next(o for o in view["ops"] if o["op"] == name)


def test_v6e_estimates_within_2x_for_nearly_all_measured_time(v6e: Run) -> None:
    view = cost_view(v6e)
    assert view["target"] == "v6e" and view["source"].startswith("trace")
    assert view["share_within_2x"] == pytest.approx(0.9954, abs=0.001)
    assert view["roofline_share_within_2x"] == pytest.approx(0.0298, abs=0.001)  # before: 3%
    assert view["measured_us"] == pytest.approx(315.12e6, rel=1e-3)
    # host offload: 5.37 GB per copy over PCIe at 32 GB/s, replayed in the module's schedule
    first = _op(view, "copy-done")
    assert first["bound"] == "host DMA" and first["ratio"] == pytest.approx(0.887, abs=0.005)
    assert _op(view, "broadcast_add_fusion")["ratio"] == pytest.approx(0.885, abs=0.005)
    # the one op outside 2x: a 2-chip all-reduce at 44 GB/s per direction, modelled at 100
    psum = _op(view, "all-reduce")
    assert (
        psum["bound"] == "ICI"
        and psum["ratio"] == pytest.approx(0.441, abs=0.005)
        and not psum["within_2x"]
    )
    jit_f = next(m for m in view["modules"] if m["module"] == "jit_f")
    assert jit_f["executions"] == 400 and jit_f["ratio"] == pytest.approx(0.864, abs=0.01)
    assert jit_f["bound"] == "host DMA"
    assert (view["bound_agrees_with_xprof"], view["bound_compared"]) == (4, 4)


def test_v5_training_estimates_within_2x_for_most_measured_time(v5: Run) -> None:
    view = cost_view(v5)
    assert view["target"] == "v5p" and view["peaks"]["flops_per_s"] == pytest.approx(233.4e12)
    assert view["share_within_2x"] == pytest.approx(0.8436, abs=0.001)
    assert view["roofline_share_within_2x"] == pytest.approx(0.0438, abs=0.001)  # before
    assert (view["bound_agrees_with_xprof"], view["bound_compared"]) == (206, 206)
    step = view["modules"][0]
    assert step["module"] == "jit_train_step" and step["ratio"] == pytest.approx(0.975, abs=0.01)
    assert step["bound"] == "compute"  # xprof's roofline: the program is compute-bound
    dus = _op(
        view, "dynamic-update-slice.31"
    )  # f32[1,512,7168] into f32[16,512,7168]{2,0,1:T(8,128)}
    assert dus["ratio"] == pytest.approx(1.02, abs=0.01) and "partial tiles" in dus["rule"]
    scatter = _op(view, "fusion.24")  # reduce-scatter of f32[2048,32000] over 4 chips
    assert scatter["bound"] == "ICI" and scatter["ratio"] == pytest.approx(1.0, abs=0.01)
    dkv = next(o for o in view["ops"] if o["op"].startswith("vmap_splash_mha_dkv"))
    assert dkv["bound"] == "compute" and dkv["ratio"] == pytest.approx(0.887, abs=0.01)
    names = set(v5.xprof_overview["name"])  # its 0% duty cycle and 0% idle: xprof found no steps
    assert "mxu_utilization_percent" in names and "device_duty_cycle_percent" not in names
    # known gap: XLA's async all-gather fusions move 22 MB in 105 us, twice one link's rate
    gather = _op(view, "async-collective-start.3")
    assert gather["ratio"] == pytest.approx(2.09, abs=0.02) and not gather["within_2x"]


def test_trace_hlo_protos_become_hlo_tables(v6e: Run) -> None:
    modules = v6e.hlo_modules.set_index("module")
    assert sorted(modules.index) == [
        "jit__psum",
        "jit_broadcast_in_dim",
        "jit_convert_element_type",
        "jit_f",
    ]
    assert set(modules["stage"]) == {"tpu_trace"} and modules.at["jit_f", "instructions"] == 31
    ops = v6e.hlo_ops[v6e.hlo_ops["module"] == "jit_f"]
    assert (ops["opcode"] == "copy-start").sum() == 6 and (ops["opcode"] == "fusion").sum() == 3
    adds = ops[ops["opcode"] == "add"]
    assert (
        set(adds["source_line"]) == {29}
        and adds["source_file"].str.endswith("host_offload_stress_test.py").all()
    )


def _expression(name: str) -> str:
    with gzip.open(real_trace(f"{V5}/data_tpu-training_op_profile_tpu_training.json.gz")) as handle:
        profile = json.load(handle)
    stack = [profile["byProgram"]]
    while stack:
        node = stack.pop()
        if node.get("name", "").startswith(name) and (node.get("xla") or {}).get("expression"):
            return node["xla"]["expression"]
        stack += node.get("children") or []
    raise AssertionError(name)


def test_rules_on_real_instructions() -> None:
    assert cm.group_size("[4,2]<=[2,4]T(1,0)", 8) == 2 and cm.group_size("{{0,1,2,3}}", 8) == 4
    assert cm.group_size("{}", 8) == 8
    dkv = cm.parse(_expression("vmap_splash_mha_dkv"))
    assert cm.attention_flops(dkv) == 8 * 16 * 2048 * 2048 * 128
    assert cm.attention_flops(cm.parse(_expression("splash_mha_fwd"))) == 4 * 16 * 2048 * 2048 * 128
    dus = cm.parse(_expression("dynamic-update-slice.33"))
    assert not cm.tile_aligned("f32[16,7168,512]{2,0,1:T(8,128)}", dus.operand_shapes[1], dus.shape)
    peaks = cm.peaks("v5p")
    assert (peaks.flops, peaks.hbm) == (229.5e12, 1382.5e9)  # per TensorCore: v5p has two


def test_trace_json_has_estimate_and_measurement(v5: Run) -> None:
    proc = subprocess.run(
        tpuscope_cmd("trace", "--store", str(v5.path.parent), v5.run_id, "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)["cost_model"]
    assert view["share_within_2x"] == pytest.approx(0.8436, abs=0.001) and len(view["ops"]) == 357
    op = view["ops"][0]
    assert {"estimated_us", "measured_us", "ratio", "within_2x", "rule"} <= set(op)
    assert op["measured_us"] == pytest.approx(200042.87, rel=1e-6)


def test_tensorcore_page_shows_estimate_against_measurement(v6e: Run) -> None:
    from tpuscope.dashboards.data import StoreData
    from tpuscope.dashboards.figures.tensorcore import estimate_scatter
    from tpuscope.dashboards.pages.tensorcore import cost_comparison, cost_rows, layout

    data = StoreData(v6e.path.parent)
    page = str(layout(data, v6e.run_id).to_plotly_json())
    assert "estimate within 2x" in page and "99.5%" in page and "cost-scatter" in page
    priced, view = cost_comparison(data, v6e.run_id)
    assert view["target"] == "v6e"
    rows = cost_rows(priced)
    assert rows.iloc[0]["op"] == "copy-done.2" and rows.iloc[0]["measured_ms"] == pytest.approx(
        87957.83, rel=1e-4
    )
    fig = estimate_scatter(priced)
    assert {t.name for t in fig.data if t.showlegend is not False} == {"HBM", "ICI", "host DMA"}
    assert fig.layout.xaxis.type == "log"
