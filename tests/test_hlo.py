"""The HLO text parser on real torch_xla and JAX HLO, and the HLO dump importer."""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest

from tests.conftest import real_trace, run_tpuscope
from tpuscope.analyze import cost_model as cm
from tpuscope.parse.hlo import (
    NO_TRAFFIC_OPCODES,
    HloParseError,
    parse_instruction,
    parse_module,
    parse_modules,
    read_dump,
)
from tpuscope.parse.hlo_rows import matmul, module_rows
from tpuscope.store import load_run

NEURON = "hlo/graphhelper_torch_neuronx"
HLO_TEXTS = [
    "bert_bert_dp_graph_2.hlo.txt",
    "bert_bert_single_graph_2.hlo.txt",
    "gpt_gpt2_tp=8.hlo.txt",
    "llama2_llama2_dp=1_tp=1_pp=1.hlo.txt",
    "llama2_llama2_dp=1_tp=8_pp=4.hlo.txt",
    "llama_tp_8.hlo.txt",
    "misc_sharding_fsdp.hlo.txt",
    "misc_sharding_megatron-lm.hlo.txt",
    "mlp_mlp_dp_2_updated.hlo.txt",
    "qwb_linear_model_pp_2_layers_2_rank_0.hlo.txt",
]

# An excerpt of a real torch_xla 2.9 dump (examples/transformer_head_dim64.py, XLA_HLO_DEBUG=1):
# current XLA prints operands as bare names, so their shapes come from their definitions.
TORCH_XLA_29 = """HloModule SyncTensorsGraph.1151, entry_computation_layout={(f32[16,128,64]{2,1,0}, f32[16,64,128]{2,1,0})->(f32[16,128,128]{2,1,0})}

ENTRY %SyncTensorsGraph.1151 (p0.1: f32[16,128,64], p1.2: f32[16,64,128]) -> (f32[16,128,128]) {
  %p0.1 = f32[16,128,64]{2,1,0} parameter(0)
  %reshape.138 = f32[16,128,64]{2,1,0} reshape(%p0.1), metadata={op_type="aten__view" op_name="aten__view" source_file="/work/main/examples/transformer_head_dim64.py" source_line=35}
  %p1.2 = f32[16,64,128]{2,1,0} parameter(1)
  %reshape.134 = f32[16,64,128]{2,1,0} reshape(%p1.2), metadata={op_type="aten__view" op_name="aten__view" source_file="/work/main/examples/transformer_head_dim64.py" source_line=35}
  %dot.139 = f32[16,128,128]{2,1,0} dot(%reshape.138, %reshape.134), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, metadata={op_type="aten__matmul" op_name="aten__matmul" source_file="/work/main/examples/transformer_head_dim64.py" source_line=35}
  ROOT %tuple.140 = (f32[16,128,128]{2,1,0}) tuple(%dot.139)
}
"""


@pytest.mark.parametrize("name", HLO_TEXTS)
def test_real_torch_xla_hlo_parses(name: str) -> None:
    path = real_trace(f"{NEURON}/{name}")
    module = read_dump(path)
    text = path.read_text()
    instructions = list(module.instructions())
    assert module.name.startswith(("SyncTensorsGraph.", "FullyUnrolled."))
    assert len(instructions) == sum(
        1 for line in text.splitlines() if " = " in line and "HloModule" not in line
    )
    assert all(
        s is not None for i in instructions for s in i.operand_shapes
    )  # every operand resolved
    assert module.entry is not None and any(i.is_root for i in module.entry.instructions)


def test_llama_dots_dims_and_source_lines() -> None:
    module = read_dump(real_trace(f"{NEURON}/llama2_llama2_dp=1_tp=1_pp=1.hlo.txt"))
    dots = {i.name: i for i in module.instructions() if i.opcode == "dot"}
    assert len(dots) == 67
    proj = dots["dot.73"]
    assert str(proj.shape) == "bf16[4194304,96]" and proj.metadata["op_type"] == "aten__mm"
    assert proj.metadata["source_file"].endswith("neuronx_distributed/parallel_layers/layers.py")
    assert proj.source_line == 239
    mm = matmul(proj)
    assert (mm.batch, mm.m, mm.n, mm.k, mm.lhs_dtype) == (1, 4194304, 96, 32, "bf16")
    scores = matmul(dots["dot.220"])  # attention q @ k^T: batch x heads = 32768, head_dim 2
    assert (scores.batch, scores.m, scores.n, scores.k) == (32768, 4096, 4096, 2)
    ops = collections.Counter(i.opcode for i in module.instructions())
    assert (sum(ops.values()), ops["all-gather"], ops["reduce-scatter"]) == (
        3517,
        43,
        35,
    )  # as SOURCES.md counts


def test_current_torch_xla_spelling_resolves_operand_shapes() -> None:
    module = parse_module(TORCH_XLA_29)
    dot = next(i for i in module.instructions() if i.opcode == "dot")
    assert [str(s) for s in dot.operand_shapes] == ["f32[16,128,64]", "f32[16,64,128]"]
    assert (
        dot.metadata["source_file"] == "/work/main/examples/transformer_head_dim64.py"
        and dot.source_line == 35
    )
    mm = matmul(dot)
    assert (mm.batch, mm.m, mm.n, mm.k, mm.precision) == (16, 128, 128, 64, "default")
    assert mm.flops == 2 * 16 * 128 * 128 * 64
    row, ops = module_rows(module)
    assert row["dots"] == 1 and row["param_bytes"] == 2 * 16 * 128 * 64 * 4
    assert row["output_bytes"] == 16 * 128 * 128 * 4


def test_one_set_of_opcodes_moves_no_data_for_the_traffic_estimate_and_the_cost_model() -> None:
    """parse/hlo's NO_TRAFFIC_OPCODES is what both the module traffic estimate (hlo_rows) and
    the op cost model read; an iota is not in it: it writes its result (XLA counts its bytes)."""
    module = read_dump(real_trace(f"{NEURON}/gpt_gpt2_tp=8.hlo.txt"))
    entry = module.entry
    assert entry is not None
    top = [i for i in module.instructions() if i.fusion is None and i.computation == entry.name]
    iota = next(i for i in top if i.opcode == "iota")
    constant = next(i for i in top if i.opcode == "constant")
    assert constant.moves_no_data and not iota.moves_no_data
    moved = [i for i in top if i.opcode not in NO_TRAFFIC_OPCODES]
    row, _ = module_rows(module)
    assert row["top_level_bytes"] == sum(
        i.shape.bytes + sum(s.bytes for s in i.operand_shapes if s is not None) for i in moved
    )
    assert iota in moved and iota.shape.bytes == 128 * 4

    chip = cm.CHIPS["v5e"]
    peak = cm.peaks("v5e")
    text = "%iota.6 = s32[128]{0} iota(), iota_dimension=0"
    priced = cm.price(text, "non-fusion elementwise", 0.0, 512.0, chip, peak)
    assert priced.bound != "none" and priced.seconds == pytest.approx(512.0 / peak.hbm)
    free = cm.price("%constant.61 = f32[] constant(1)", "constant", 0.0, 4.0, chip, peak)
    assert (free.seconds, free.bound) == (0.0, "none")


def test_fusion_membership_in_optimized_jax_hlo() -> None:
    path = real_trace(
        "hlo/jaxdecomp_benchmarks_a100/16_jaxfft_1024_4_4_NCCL_float32_FFT.compiled.after_optimizations.hlo.txt"
    )
    module = read_dump(path)
    fusions = {i.name for i in module.instructions() if i.opcode == "fusion"}
    fused = [i for i in module.instructions() if i.fusion is not None]
    assert fusions and fused
    assert {i.fusion for i in fused} <= fusions
    assert all(i.computation != module.entry.name for i in fused)


def test_convolution_matmul_view_and_tpu_layouts() -> None:
    conv = parse_instruction(
        "%convolution.3 = f32[8,32,32,64]{3,2,1,0} convolution(f32[8,32,32,3]{3,2,1,0} %p0, "
        "f32[3,3,3,64]{3,2,1,0} %p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"
    )
    mm = matmul(conv)
    assert (mm.batch, mm.m, mm.n, mm.k) == (1, 8 * 32 * 32, 64, 3 * 9)
    grouped = parse_instruction(
        "%c = bf16[4,16,16,32]{3,2,1,0} convolution(bf16[4,16,16,32]{3,2,1,0} %a, "
        "bf16[3,3,1,32]{3,2,1,0} %b), window={size=3x3 pad=1_1x1_1}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=32"
    )
    depthwise = matmul(grouped)
    assert (depthwise.batch, depthwise.n, depthwise.k) == (32, 1, 9)
    # XLA's TPU HLO writes a batched dot as a convolution over its batch dims (dilated by their
    # own size), and a weight's heads dim as a padded, reversed window over a 1-element input
    tpu = {
        "0b1f_0o1i->01bf": ("bf16[16,16,511,511]", "bf16[16,511,16,64]", "bf16[16,511,16,64]"),
        "0bf1_i1o0->0b1f": ("bf16[16,511,16,64]", "bf16[16,511,1024,1]", "bf16[1024,16,64,1]"),
        "1fb0_1i0o->b0f1": ("bf16[1024,16,64,1]", "bf16[16,511,1024,1]", "bf16[16,511,16,64]"),
    }
    windows = {
        "0b1f_0o1i->01bf": "size=16x16 stride=15x15 lhs_dilate=16x16",
        "0bf1_i1o0->0b1f": "size=1x16 pad=0_0x15_15 rhs_reversal=0x1",
        "1fb0_1i0o->b0f1": "size=16x16 pad=15_15x0_0 rhs_reversal=1x0",
    }
    views = {
        labels: matmul(
            parse_instruction(
                f"%c = {out} convolution({lhs} %a, {rhs} %b), window={{{windows[labels]}}}, "
                f"dim_labels={labels}"
            )
        )
        for labels, (out, lhs, rhs) in tpu.items()
    }
    assert [(v.batch, v.m, v.n, v.k) for v in views.values()] == [
        (256, 511, 511, 64),  # q @ k^T: batch x heads, queries, keys, head_dim
        (1, 16 * 511, 1024, 1024),  # a [1024] -> [16 heads, 64] projection
        (1, 1024, 1024, 16 * 511),  # its weight gradient
    ]
    # an op name from a TPU trace's "XLA Ops" line: tiled layouts and memory spaces
    op = parse_instruction(
        "%broadcast.2 = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} "
        "broadcast(f32[]{:T(128)S(6)} %copy), dimensions={}"
    )
    assert op.opcode == "broadcast" and str(op.shape) == "f32[5,1024,1024,256]"
    assert op.operands == ["copy"] and str(op.operand_shapes[0]) == "f32[]"
    precise = parse_instruction(
        "%d = f32[8,8]{1,0} dot(f32[8,8]{1,0} %a, f32[8,8]{1,0} %b), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
        "operand_precision={highest,highest}"
    )
    assert matmul(precise).precision == "highest"


def test_an_attribute_over_several_lines_is_one_instruction() -> None:
    """A Pallas kernel's HLO (splash attention, as Keras runs it on a TPU) carries JSON
    metadata whose text breaks the line inside its braces."""
    (module,) = parse_modules(
        "HloModule m\n\nENTRY %main (q: bf16[2,4,8,64]) -> bf16[2,4,8,64] {\n"
        "  %q = bf16[2,4,8,64]{3,2,1,0} parameter(0)\n"
        "  ROOT %splash.1 = bf16[2,4,8,64]{3,2,1,0} custom-call(bf16[2,4,8,64]{3,2,1,0} %q), "
        'custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={\n'
        '"xprof_metadata":"{\\"block_q\\": 128, \\"q_layout\\": 1}"\n'
        '}}, metadata={op_name="jit(f)/splash_mha_fwd/pallas_call"}\n'
        "}\n",
        source="splash.txt",
    )
    root = module.entry.instructions[-1]
    assert root.opcode == "custom-call" and root.name == "splash.1"
    assert root.metadata["op_name"] == "jit(f)/splash_mha_fwd/pallas_call"


def test_not_hlo_names_the_line() -> None:
    with pytest.raises(HloParseError, match=r"bad\.txt:4: not an HLO instruction"):
        parse_modules(
            "HloModule m\n\nENTRY %main () -> f32[] {\n  what is this\n}\n", source="bad.txt"
        )


def test_import_dump_folder_refuses_bad_file_and_goes_on(tmp_path: Path) -> None:
    dump = tmp_path / "xla_dump"
    dump.mkdir()
    shutil.copy(
        real_trace(f"{NEURON}/mlp_mlp_dp_2_updated.hlo.txt"),
        dump / "module_0000.SyncTensorsGraph.357.before_optimizations.txt",
    )
    (dump / "module_0001.SyncTensorsGraph.9.before_optimizations.txt").write_text(
        "HloModule broken\n\nENTRY %e () -> f32[] {\n  %x = f32[] garbage\n}\n"
    )
    (dump / "module_0000.SyncTensorsGraph.357.ir-no-opt.ll").write_text("; LLVM IR, not read\n")
    store = tmp_path / "store"
    proc = run_tpuscope("import", "--store", str(store), "--quiet", str(dump))
    assert proc.returncode == 2
    assert "module_0001.SyncTensorsGraph.9.before_optimizations.txt" in proc.stderr
    run = load_run(next(store.iterdir()))
    assert list(run.hlo_modules["module"]) == ["SyncTensorsGraph.357"]
    dots = run.hlo_ops[run.hlo_ops["opcode"] == "dot"]
    assert len(dots) == 8 and set(dots["stage"]) == {"before_optimizations"}
    sources = dots["source_file"].dropna()
    assert len(sources) and sources.str.endswith("torch/nn/modules/linear.py").all()
