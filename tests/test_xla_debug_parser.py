"""The text parsers behind compiles: PT_XLA_DEBUG blocks and HLO module headers, on real text.

Inputs are third-party logs and HLO from ../shared/real_traces (skipped when absent, failing in CI)
and a small HLO dump made here by XLA itself. Runs in about 1 s.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import real_trace
from tpuscope.collect.xla.fallback_sites import MAX_ARMED_STEPS, SiteTracer
from tpuscope.collect.xla.shapes import (
    HloDumpShapes,
    ModuleShapes,
    dump_dir_in,
    pair_modules,
    parse_entry_layout,
    parse_entry_signature,
    read_header,
)
from tpuscope.parse.pt_xla_debug import DebugParser, parse_debug_file, parse_debug_text

IMAGENET = (
    "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_user_mark_step_imagenet.pt_xla_debug.txt"
)
DECODER = (
    "pt_xla_debug/pytorch_xla_troubleshooting_2024-05_parallel_loader_decoder_only.pt_xla_debug.txt"
)
NOTES = "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_auto_metrics_analysis.pt-xla-profiler.txt"
NEURON = "hlo/graphhelper_torch_neuronx"


def test_old_mark_step_wording_and_cut_stack() -> None:
    log = parse_debug_file(real_trace(IMAGENET))
    [compile_], [execution] = log.compiles, log.executions
    assert compile_.cause == "user mark_step"
    assert compile_.graph_hash == execution.graph_hash == "537d4b0264b029688281412214d252e9"
    assert (compile_.num_inputs, compile_.num_outputs) == (588, 320)
    assert compile_.truncated and len(compile_.frames) == 8
    # torch_xla's own frames (mark_step, broadcast_master_param) are skipped: the user's line
    assert compile_.location == "/workspaces/dk2/pytorch/xla/test/test_train_mp_imagenet.py:261"


def test_post_compilation_sizes_and_parallel_loader_cause() -> None:
    [compile_] = parse_debug_file(real_trace(DECODER)).compiles
    assert compile_.cause == "mark_step in parallel loader at step end"
    assert compile_.sizes == {
        "input_gb": 1.548,
        "output_gb": 7.92246,
        "aliased_gb": 1.547871,
        "intermediate_gb": 12.124478,
        "program_gb": 0.02821,
    }
    assert compile_.location.endswith("examples/train_decoder_only_base.py:48")


def test_profiler_notes_are_kept() -> None:
    notes = parse_debug_file(real_trace(NOTES)).profiler_notes
    assert notes[0] == "CompileTime too frequent: 21 counts during 11 steps"
    assert any("aten::_ctc_loss_backward" in n for n in notes)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_incremental_feeding_gives_the_same_records(chunk: int) -> None:
    """The collector tails the file as torch_xla writes it: any split must parse alike."""
    text = real_trace(DECODER).read_text() + real_trace(IMAGENET).read_text()
    parser = DebugParser()
    for start in range(0, len(text), chunk):
        parser.feed(text[start : start + chunk])
    parser.feed("\n")
    whole = parse_debug_text(text)
    assert [(r.graph_hash, r.cause, r.frames, r.sizes) for r in parser.log.compiles] == [
        (r.graph_hash, r.cause, r.frames, r.sizes) for r in whole.compiles
    ]
    assert len(whole.compiles) == 2 and len(whole.executions) == 2


# -- HLO headers ---------------------------------------------------------------------------
def test_entry_layout_with_index_comments_tuples_and_aliasing() -> None:
    header = (
        "HloModule SyncTensorsGraph.1101, input_output_alias={ {0}: (1, {}, may-alias) }, "
        "buffer_donor={ (1, {}) }, entry_computation_layout={(s64[8,65]{1,0}, f32[512]{0}, "
        "/*index=2*/(f32[2]{0}, s32[]), pred[])->(f32[8,64,512]{2,1,0}, f32[])}"
    )
    assert parse_entry_layout(header) == (
        ["s64[8,65]", "f32[512]", "(f32[2]{0}, s32[])", "pred[]"],
        ["f32[8,64,512]", "f32[]"],
    )
    assert parse_entry_layout("HloModule m, entry_computation_layout={()->f32[]}") == (
        [],
        ["f32[]"],
    )
    assert parse_entry_layout("HloModule m") is None


@pytest.mark.parametrize(
    "name",
    [
        "mlp_mlp_dp_2_updated.hlo.txt",
        "misc_sharding_fsdp.hlo.txt",
        "llama2_llama2_dp=1_tp=1_pp=1.hlo.txt",
    ],
)
def test_entry_signature_of_real_torch_xla_hlo(name: str) -> None:
    """Older headers (torch-neuronx HLO) carry no layout: the ENTRY line has the parameters."""
    text = real_trace(f"{NEURON}/{name}").read_text()
    assert parse_entry_layout(text.split("\n", 1)[0]) is None
    inputs, outputs = parse_entry_signature(text)
    entry = text[text.index("\nENTRY ") :]
    declared = set(re.findall(r"parameter\((\d+)\)", entry[: entry.find("\n}")]))
    assert len(inputs) == len(declared) and outputs
    first = re.search(r"ENTRY %\S+ \(\w[\w.]*: (\S+?)[,)]", text)[1]
    assert inputs[0] == first


def test_dump_reader_reads_real_xla_headers_and_empties_its_folder(tmp_path: Path) -> None:
    """Files as XLA 0.x writes them (header from a real CPU dump of this project)."""
    header = (
        "HloModule SyncTensorsGraph.70, entry_computation_layout={(s64[])->(f32[3,5]{1,0}, f32[])}\n\n"
        "%AddComputation.64 (x.65: f32[], y.66: f32[]) -> f32[] {\n}\n"
    )
    (tmp_path / "module_0002.SyncTensorsGraph.70.before_optimizations.txt").write_text(header)
    (tmp_path / "module_0002.SyncTensorsGraph.70.cpu_after_optimizations.txt").write_text("x")
    (tmp_path / "module_0000.SyncTensorsGraph.12.before_optimizations.txt").write_text(
        header.replace("f32[3,5]", "f32[3,7]")
    )
    reader = HloDumpShapes(tmp_path, owned=True)
    modules = reader.poll()
    assert [(m.number, m.inputs, m.outputs) for m in modules] == [
        (0, ["s64[]"], ["f32[3,7]", "f32[]"]),
        (2, ["s64[]"], ["f32[3,5]", "f32[]"]),
    ]
    assert reader.poll() == []  # read once; the files go in the flush thread's sweep
    (tmp_path / "module_0004.jit_f.cpu_after_optimizations.txt").write_text("x")  # not polled yet
    (tmp_path / "module_0004.jit_f.before_optimizations.txt").write_text(header)
    reader.sweep()
    assert [p.name for p in tmp_path.iterdir()] == ["module_0004.jit_f.before_optimizations.txt"]
    assert [m.number for m in reader.poll()] == [4]
    reader.sweep()
    assert list(tmp_path.iterdir()) == [] and reader.poll() == []


def test_user_dump_folders_are_read_not_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_FLAGS", f"--xla_cpu_enable_fast_math=false --xla_dump_to={tmp_path}")
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_DIR", raising=False)
    reader, env_set = HloDumpShapes.enable(tmp_path / "ours")
    assert reader is not None and reader.folder == tmp_path and not reader.owned and env_set == {}


def test_dump_is_on_by_default_text_only_and_off_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    monkeypatch.delenv("TPUSCOPE_HLO_SHAPES", raising=False)
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_DIR", raising=False)
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_READ", raising=False)
    reader, env_set = HloDumpShapes.enable(tmp_path / "a")
    assert reader.owned and dump_dir_in(env_set["XLA_FLAGS"]) == str(tmp_path / "a")
    assert (
        env_set["XLA_FLAGS"]
        == f"--xla_cpu_enable_fast_math=false --xla_dump_to={tmp_path / 'a'} --xla_dump_hlo_as_text"
    )
    # a child process inherits the parent's folder: it gets its own, and the parent's flags go
    reader2, env2 = HloDumpShapes.enable(tmp_path / "b")
    assert reader2.folder == tmp_path / "b"
    assert (
        env2["XLA_FLAGS"]
        == f"--xla_cpu_enable_fast_math=false --xla_dump_to={tmp_path / 'b'} --xla_dump_hlo_as_text"
    )
    # ... and with TPUSCOPE_HLO_SHAPES=0 no folder at all (not the parent's either)
    monkeypatch.setenv("TPUSCOPE_HLO_SHAPES", "0")
    assert HloDumpShapes.enable(tmp_path / "c") == (
        None,
        {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"},
    )
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_DIR")
    assert HloDumpShapes.enable(tmp_path / "c") == (None, {})
    reader.close()
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "flag",
    [
        "--xla_dump_hlo_as_text",
        "--xla_dump_hlo_module_re=SyncTensors.*",
        "--xla_enable_dumping=false",
    ],
)
def test_user_dump_flags_without_a_folder_are_left_to_the_user(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XLA dumps to stdout when a format is set without --xla_dump_to: adding a folder would
    move the user's dump; a module filter or a switch is the user's choice too."""
    monkeypatch.setenv("XLA_FLAGS", flag)
    monkeypatch.delenv("TPUSCOPE_HLO_SHAPES", raising=False)
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_DIR", raising=False)
    monkeypatch.delenv("TPUSCOPE_XLA_DUMP_READ", raising=False)
    assert HloDumpShapes.enable(tmp_path / "a") == (None, {})
    assert os.environ["XLA_FLAGS"] == flag


def test_long_headers_are_read_whole(tmp_path: Path) -> None:
    line = "HloModule m, entry_computation_layout={(" + ", ".join(["f32[8]{0}"] * 20000) + ")->()}"
    path = tmp_path / "h.txt"
    path.write_text(line + "\nrest\n")
    assert read_header(path) == line and len(parse_entry_layout(line)[0]) == 20000


def test_modules_pair_with_compiles_by_order_and_input_count() -> None:
    def module(n: int, inputs: int) -> ModuleShapes:
        return ModuleShapes(n, "SyncTensorsGraph", [f"f32[{i}]" for i in range(inputs)], [])

    a, b, extra = module(0, 25), module(1, 55), module(2, 3)
    assert pair_modules([25, 55], [a, b]) == [a, b]
    assert pair_modules([25, 55], [a, extra, b]) == [a, b]  # an extra module is skipped
    assert pair_modules([25, 55], [b]) == [None, b]  # a missing dump leaves a gap
    assert pair_modules([25, 9], [a, b]) == [a, None]  # never someone else's shapes
    assert pair_modules([None], [extra]) == [extra]


# -- when fallback call sites are traced -------------------------------------------------------
class _ArmLog(SiteTracer):
    """The tracer's arming decisions, without pushing a TorchFunctionMode."""

    def __init__(self) -> None:
        super().__init__(xlac=None)
        self.armed_at: list[int] = []
        self._on = False

    @property
    def armed(self) -> bool:
        return self._on

    def read(self) -> tuple[int, ...]:
        return ()

    def _arm(self) -> None:
        self._on = True
        self.armed_steps += 1

    def _disarm(self) -> None:
        self._left, self._on = 0, False


def _arming(ops_per_step: list[dict[str, int]], reads: list[int] | None = None) -> list[int]:
    tracer = _ArmLog()
    armed = []
    reads = reads or [0] * len(ops_per_step)
    for step, ops in enumerate(ops_per_step):
        if tracer.armed:  # what the mode would have recorded during the step
            armed.append(step)
            tracer.fallback_sites.update({(op, "train.py:3"): n for op, n in ops.items()})
            if reads[step]:
                tracer.read_sites[("item", "train.py:9")] += reads[step]
        tracer.on_step_end(ops, reads[step])
    return armed


def test_tracing_is_armed_after_a_new_op_and_stops_once_located() -> None:
    every_step = [{"aten::nonzero": 3}] * 10
    assert _arming(every_step) == [1]  # traced in step 1, located, disarmed
    assert _arming([{}] * 10) == []  # a clean run is never traced


def test_periodic_ops_get_longer_windows_within_the_budget() -> None:
    every_4th = [{"aten::median": 1} if s % 4 == 0 else {} for s in range(40)]
    armed = _arming(every_4th)
    assert armed[:2] == [1, 2] and 8 in armed  # window 2 missed step 4, window 4 caught step 8
    assert len(armed) <= MAX_ARMED_STEPS


def test_more_host_reads_than_ever_traced_arms_it() -> None:
    assert _arming([{}] * 6, reads=[0, 1, 1, 1, 2, 2]) == [2, 5]
