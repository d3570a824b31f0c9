"""The zoo (`tpuscope sweep`): tiny Hugging Face models through tpuscope, each cell checked
against the counters measured inside its own process.

The CI subset is chosen to cover every rule and every way a cell ends, found by running the
sweep (docs/zoo.md): llama `train` (clean: compiles at steps 0-1 only), gpt2 `generate` (a CPU
fallback, aten::isin in generate's stopping criteria; value reads; the decode compiling again
per token), mixtral `train` (an MoE whose default experts kernel raises on XLA: histc on int
tensors falls back to the CPU, which has no int histc: a recorded `fallback-error` naming the op
and transformers' line; then its workaround cell `train+batched_mm`, the experts implementation a
user switches to, which trains clean), jetmoe `train` (an MoE that aborts the process inside XLA: a recorded crash), llama
`eager` (torch_xla's eager mode: op by op, and only there), bart `train` (its forward reads a
value from the device every step). One sweep
of those cells runs once per session through the CLI; the other tests reuse its store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tpuscope
from tpuscope.schema_consts import ADVICE_RULES
from tpuscope.zoo import catalog, cell, configs, table
from tpuscope.zoo.cell import run_cell
from tpuscope.zoo.driver import plan

pytestmark = pytest.mark.slow

SUBSET = (
    ("llama", "train"),
    ("gpt2", "generate"),
    ("mixtral", "train"),
    ("jetmoe", "train"),
    ("llama", "eager"),
    ("bart", "train"),
)


def rules(record: dict[str, Any]) -> list[str]:
    """The rules of a cell's findings but compile_time's (how fast this machine compiled the
    cell, not what the model does: tests/test_compile_time.py)."""
    return [f["rule"] for f in record["findings"] if f["rule"] not in ADVICE_RULES]


def _sweep(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_tpuscope("sweep", "--store", str(store), "--quiet", "--json", *args, timeout=900)


@pytest.fixture(scope="session")
def zoo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[tuple[str, str], dict[str, Any]]]:
    """(store, {(type, scenario): record}) of the CI subset, swept once (one CLI call per scenario)."""
    store = tmp_path_factory.mktemp("zoo-store")
    for scenario in ("train", "generate", "eager"):
        only = [arg for t, s in SUBSET if s == scenario for arg in ("--only", t)]
        proc = _sweep(store, "--task", "causal-lm", "--scenario", scenario, *only)
        assert proc.returncode == 0, proc.stderr[-3000:]
        json.loads(proc.stdout)
    records = {(r["model_type"], r["scenario"]): r for r in table.load_records(store)}
    assert set(records) == {*SUBSET, ("mixtral", "train+batched_mm")}
    return store, records


# the catalog and the configs (no device, no run) -------------------------------------------------


def test_catalog_is_transformers_registry_causal_lm_first() -> None:
    entries = catalog.entries()
    causal = [e for e in entries if e.task == "causal-lm"]
    assert len(causal) == 196  # transformers 5.24.0's MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    assert entries[: len(causal)] == causal
    assert [e.model_type for e in catalog.select(causal, ["gpt*"], ["gpt_neo*"])][:3] == [
        "gpt-sw3",
        "gpt2",
        "gpt_bigcode",
    ]


def test_shards_split_model_types_without_overlap() -> None:
    everything = plan(("train", "generate"), ["causal-lm"], ["l*"])
    parts = [plan(("train", "generate"), ["causal-lm"], ["l*"], shard=(k, 3)) for k in (1, 2, 3)]
    assert sorted(map(repr, everything)) == sorted(repr(c) for part in parts for c in part)
    types = [{e.model_type for e, _ in part} for part in parts]
    assert not (types[0] & types[1] or types[1] & types[2] or types[0] & types[2])
    assert all(s in ("train", "generate") for part in parts for _, s in part)


@pytest.mark.parametrize(
    "model_type",
    ["llama", "mistral", "mixtral", "gemma3_text", "qwen3_next", "gpt2", "deepseek_v3", "falcon"],
)
def test_tiny_configs_keep_the_architecture(model_type: str) -> None:
    from transformers import CONFIG_MAPPING

    default = CONFIG_MAPPING[model_type]()
    tiny = configs.tiny_config(model_type, decoder=True)
    cls = dict((e.model_type, e.class_name) for e in catalog.entries(["causal-lm"]))[model_type]
    assert configs.count_params(tiny, cls) < 2_000_000
    heads = getattr(default, "num_attention_heads", None)
    kv = getattr(default, "num_key_value_heads", None)
    if heads and kv:  # MQA stays MQA, GQA stays grouped, MHA stays MHA
        want = 1 if kv == 1 else (configs.HEADS if kv >= heads else 2)
        assert tiny.num_key_value_heads == want
    for key in ("layer_types",):  # one layer of every kind the full model has
        if isinstance(getattr(default, key, None), list):
            assert set(getattr(tiny, key)) == set(getattr(default, key))
            assert len(getattr(tiny, key)) == tiny.num_hidden_layers
    if getattr(default, "num_local_experts", None) or getattr(default, "n_routed_experts", None):
        experts = getattr(tiny, "num_local_experts", None) or tiny.n_routed_experts
        assert experts == 4 and tiny.num_experts_per_tok <= 2


@pytest.mark.parametrize(
    ("model_type", "check"),
    [
        # a derived attribute is derived again: MLA's head_dim is qk_rope_head_dim (rope and q agree)
        ("deepseek_v3", lambda t, d: t.head_dim == t.qk_rope_head_dim == 8 and t.qk_head_dim == 16),
        # a dim that is a fraction of the head dim keeps its fraction (codegen: 64 of 256 -> 4 of 16)
        (
            "codegen",
            lambda t, d: t.rotary_dim * d.n_embd // d.n_head == d.rotary_dim * configs.HEAD_DIM,
        ),
        # windows below the sequence (16 tokens): sliding attention is exercised
        ("cohere2", lambda t, d: t.sliding_window == configs.WINDOW < 16 < d.sliding_window),
        # a default with no attention layer gets one (its cache needs one), the rest stays Mamba
        ("bamba", lambda t, d: t.attn_layer_indices == [t.num_hidden_layers - 1]),
        # attention every 8th layer from the 4th -> period 2 over 4 layers: both kinds, each repeated
        (
            "jamba",
            lambda t, d: sorted(set(t.layer_types)) == ["full_attention", "linear_attention"],
        ),
        # zamba ties its shared block from the first hybrid layer to the others: two hybrid layers kept
        # and its attention_head_dim, left None in the default, is derived again (2 x hidden / heads)
        (
            "zamba",
            lambda t, d: (
                t.layers_block_type.count("hybrid") == 2
                and t.attention_head_dim * t.num_attention_heads
                == t.attention_hidden_size
                == 2 * t.hidden_size
            ),
        ),
        # parts summing to the hidden size keep summing to it; factors of the positions multiply to them
        (
            "reformer",
            lambda t, d: (
                sum(t.axial_pos_embds_dim) == t.hidden_size
                and t.axial_pos_shape[0] * t.axial_pos_shape[1] == t.max_position_embeddings
            ),
        ),
        ("xmod", lambda t, d: d.default_language is None and t.default_language == d.languages[0]),
        # a cyclic pattern shorter than the layers: its distinct kinds, one layer each
        (
            "recurrent_gemma",
            lambda t, d: t.block_types == ["recurrent", "attention"] and t.num_hidden_layers == 2,
        ),
        # layer counts that partition the layers (8 + 20 + 8 = 36) stay a partition
        (
            "dory",
            lambda t, d: (
                t.n_input_layers + t.n_recurrent_layers + t.n_output_layers == t.num_hidden_layers
            ),
        ),
        # MoE routing left None in the default (topk(k=None)) gets the tiny top-k
        ("deepseek_v2", lambda t, d: d.num_experts_per_tok is None and t.num_experts_per_tok == 2),
        # expert groups never outnumber the experts (num_experts // n_group > 0)
        ("bailing_hybrid", lambda t, d: t.num_local_experts // t.num_expert_group >= 1),
        # an adapter width that mirrors a hidden size stays equal to it (validate_architecture)
        (
            "dots3_note",
            lambda t, d: t.audio_config.adapter_input_size == t.audio_config.hidden_size,
        ),
    ],
)
def test_tiny_config_rules(model_type: str, check: Any) -> None:
    from transformers import CONFIG_MAPPING

    assert check(configs.tiny_config(model_type, decoder=True), CONFIG_MAPPING[model_type]())


@pytest.mark.parametrize(
    ("model_type", "class_name"),
    [
        ("swin", "SwinForImageClassification"),
        ("bit", "BitForImageClassification"),
        ("resnet", "ResNetForImageClassification"),
    ],
)
def test_a_backbone_of_stages_keeps_its_ties_and_trains_on_images(
    model_type: str, class_name: str
) -> None:
    """Stage widths divided value-wise (Swin's 3 heads still divide every stage, BiT's 32
    GroupNorm groups its channels, ResNet's 2048 is 512), one block a stage; the image batch at
    the config's own size: a forward and backward on the CPU (no XLA, ~1 s)."""
    from transformers import CONFIG_MAPPING

    from tpuscope.zoo import inputs

    default = CONFIG_MAPPING[model_type]()
    config, model, params = configs.build(model_type, class_name)
    assert params < 1_000_000 and list(config.depths) == [1] * len(default.depths)
    if hasattr(default, "hidden_sizes"):
        assert [w * 4 for w in config.hidden_sizes] == list(default.hidden_sizes)
    if hasattr(default, "num_heads"):  # heads kept; stage i is embed_dim x 2^i wide
        assert list(config.num_heads) == list(default.num_heads)
        assert all(config.embed_dim * 2**i % h == 0 for i, h in enumerate(config.num_heads))
    if hasattr(default, "num_groups"):
        assert all(w % config.num_groups == 0 for w in config.hidden_sizes)
    batch = inputs.batch("image-cls", config, 16)
    assert batch["pixel_values"].shape == (inputs.BATCH, 3, 224, 224)
    model.train()(**batch).loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_compound_scaling_and_nested_block_lists_keep_their_ties() -> None:
    """EfficientNet scales its stage lists and its code's constants (stem 32, top 1280) by
    width_coefficient: the coefficient is divided instead of the lists, so the stem still feeds
    stage 1 and the top the head; PP-LCNet's per-block lists take the value-wise map, so the
    stem still feeds its first block (config only: EfficientNet's 600-pixel forward is ~12 s)."""
    from transformers.models.efficientnet.modeling_efficientnet import round_filters

    config = configs.tiny_config("efficientnet")
    assert (config.width_coefficient, config.depth_coefficient) == (0.5, 1.0)
    assert list(config.num_block_repeats) == [1] * 7 and config.in_channels[0] == 32
    assert round_filters(config, 32) == round_filters(config, config.in_channels[0])
    assert round_filters(config, 1280) == config.hidden_dim == 640
    lcnet = configs.tiny_config("pp_lcnet")
    assert lcnet.block_configs[0][0] == [3, lcnet.stem_channels, 8, 1, False]
    assert lcnet.block_configs[-1][-1] == [5, 128, 128, 1, True]


@pytest.mark.parametrize(
    ("model_type", "shape"),
    [
        ("wav2vec2", {"input_values": (2, 16_000)}),  # the raw 16 kHz waveform, one second
        ("whisper", {"input_features": (2, 80, 3000)}),  # log-mels, twice the source positions
        ("wav2vec2-bert", {"input_features": (2, 100, 160)}),  # stacked features, projection width
        ("audio-spectrogram-transformer", {"input_values": (2, 1024, 128)}),  # max_length x mels
    ],
)
def test_audio_batches_take_the_form_each_model_reads(model_type: str, shape: dict) -> None:
    from tpuscope.zoo import inputs

    cls = dict((e.model_type, e.class_name) for e in catalog.entries(["audio-cls"]))[model_type]
    config = configs.for_class(configs.tiny_config(model_type), cls)
    batch = inputs.batch("audio-cls", config, 16)
    assert {k: tuple(v.shape) for k, v in batch.items() if k != "labels"} == shape
    if model_type == "wav2vec2-bert":  # a forward and backward on the CPU (0.2 s)
        configs.model_class(cls)(config).train()(**batch).loss.backward()


def test_a_vision_config_that_counts_patches_gets_patches_not_an_image() -> None:
    """SigLIP 2 (NaFlex) names no image size but a patch count: its batch is the patches,
    flattened (3 x 16 x 16), with their mask and the grid's shape, as its processor makes it."""
    from tpuscope.zoo import inputs

    config = configs.for_class(configs.tiny_config("siglip2"), "Siglip2ForImageClassification")
    batch = inputs.batch("image-cls", config, 16)
    assert {k: tuple(v.shape) for k, v in batch.items()} == {
        "pixel_values": (2, 256, 768),
        "pixel_attention_mask": (2, 256),
        "spatial_shapes": (2, 2),
        "labels": (2,),
    }
    assert batch["spatial_shapes"].tolist() == [[16, 16], [16, 16]]


def test_a_bounded_set_note_is_not_a_recompile_claim() -> None:
    """mobilevitv2 `train` (image-cls): its forward cuts 2 graphs at one line, one per stage
    width (dim 0: 192, 256), each compiled once in step 0; tpuscope's card is the bounded set's
    low note with 0 recompiles, the counters' truth no recompile: they agree."""
    from tpuscope.zoo import agree

    note = {"rule": "recompile", "evidence": {"verdict": "bounded", "recompiles": 0}}
    storm = {"rule": "recompile", "evidence": {"verdict": "recompile", "recompiles": 3}}
    assert agree.said([note], 4)["recompile"] is False
    assert agree.said([note, storm], 4)["recompile"] is True


def test_a_class_of_one_part_of_a_composite_config_takes_that_part() -> None:
    composite = configs.tiny_config("musicgen", decoder=True)  # a text encoder and a decoder
    assert (
        type(configs.for_class(composite, "MusicgenForCausalLM")).__name__
        == "MusicgenDecoderConfig"
    )


def test_the_tensorcore_truth_reads_widths_and_f32_dots() -> None:
    from tpuscope.zoo import widths

    config = widths.full_width_config("gpt2", "GPT2LMHeadModel")  # real widths, fewer layers
    assert (config.n_embd, config.n_head, config.vocab_size, config.n_layer) == (768, 12, 50257, 2)
    assert widths.expected(config) == {
        t: ["head_dim"] for t in widths.EDGE
    }  # 64; 50257 pads only 0.09%
    assert widths.padding(50257, 128) < widths.MIN_WASTE <= widths.padding(1000, 128)
    hlo = (
        "  %a = f32[4,8]{1,0} parameter(0)\n  %b = f32[8,2]{1,0} parameter(1)\n"
        "  %c = bf16[8,2]{1,0} parameter(2)\n  %d = bf16[4,8]{1,0} parameter(3)\n"
        "  %dot.1 = f32[4,2]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT %dot.2 = f32[4,2]{1,0} dot(%d, %c), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    )
    assert widths.f32_dots(hlo) == 1
    inline = "  %dot.3 = f32[4,2]{1,0} dot(f32[4,8]{1,0} %x, f32[8,2]{1,0} %y), lhs_contracting_dims={1}\n"
    assert widths.f32_dots(inline) == 1  # torch_xla's text prints operand types inline
    assert widths.expected(config, f32=1)["v6e"] == ["f32", "head_dim"]
    hybrid = widths.full_width_config("falcon_h1", "FalconH1ForCausalLM")  # attention head_dim 128
    assert widths.expected(hybrid)["v5e"] == ["head_dim"]  # its SSM heads are 8 wide
    short = widths.full_width_config("bert-generation", "BertGenerationDecoder")
    assert widths.positions(short, 1024) == 512 and widths.positions(config, 1024) == 1024


def test_a_build_that_is_not_tiny_is_refused_before_any_weight() -> None:
    with pytest.raises(configs.NotTiny, match="parameters after shrinking"):
        configs.build("llama", "LlamaForCausalLM", decoder=True, max_params=1000)


def test_a_package_this_machine_lacks_is_its_own_status() -> None:
    from tpuscope.zoo.truthread import CellTruth

    message = "TimmWrapperModel requires the timm library but it was not found in your environment."
    truth = CellTruth(
        {
            "error": {
                "status": "broken-default",
                "type": "ImportError",
                "message": message,
                "phase": "build",
            }
        }
    )
    assert cell._status(1, "", truth, 900)["status"] == "needs-package"  # gemma3n's vision tower


# the CI subset: findings against the counters --------------------------------------------------


def test_every_cell_that_ran_agrees_with_its_counters(zoo) -> None:
    _, records = zoo
    ran = [r for r in records.values() if r["status"] == "ok"]
    assert {(r["model_type"], r["scenario"]) for r in ran} == {
        ("llama", "train"),
        ("gpt2", "generate"),
        ("llama", "eager"),
        ("bart", "train"),
        ("mixtral", "train+batched_mm"),
    }
    for r in ran:
        assert r["disagreements"] == [], (r["model_type"], r["scenario"], r["disagreements"])


def test_llama_train_is_clean_after_the_optimizer_step(zoo) -> None:
    record = zoo[1][("llama", "train")]
    assert record["truth"]["uncached"] == [1, 1, 0, 0]  # the step, then AdamW's state; cached after
    assert record["truth"]["fallbacks"] == {} and record["truth"]["reads"] == [0, 0, 0, 0]
    assert rules(record) == [] and record["summary"]["steps"] == 4
    assert record["run_id"].startswith("zoo-llama-train-")


def test_gpt2_generate_falls_back_reads_and_compiles_per_token(zoo) -> None:
    record = zoo[1][("gpt2", "generate")]
    truth = record["truth"]
    assert list(truth["fallbacks"]) == ["aten::isin.Tensor_Tensor"]
    assert all(n > 0 for n in truth["fallbacks"]["aten::isin.Tensor_Tensor"])
    assert truth["uncached"][1] == 0  # the second, identical request compiles nothing
    assert any(n > 0 for n in truth["per_token"][0][1:])  # but the first compiled at every token
    assert all(n > 0 for n in truth["reads"])
    rules = {f["rule"]: f for f in record["findings"]}
    # the first request's per-token graphs are its warm-up (the second compiles nothing): no recompile
    assert set(rules) == {"cpu_fallback", "host_sync"}
    assert rules["cpu_fallback"]["op"] == "aten::isin.Tensor_Tensor"


def test_a_forward_that_reads_a_value_every_step_is_a_host_sync_at_the_forward_line(zoo) -> None:
    record = zoo[1][("bart", "train")]
    assert record["truth"]["reads"] == [1, 1, 1, 1] and record["truth"]["uncached"][2:] == [0, 0]
    assert rules(record) == ["host_sync"]
    assert record["findings"][0]["location"].endswith(
        f"zoo_train.py:{_line('zoo_train.py', 'forward')}"
    )


def test_eager_mode_is_op_by_op_at_the_line_that_turns_it_on(zoo) -> None:
    record = zoo[1][("llama", "eager")]
    assert all(n > 20 for n in record["truth"]["executions"])  # one execution per op
    assert rules(record) == ["op_by_op"]
    assert record["findings"][0]["location"].endswith(
        f"zoo_train.py:{_line('zoo_train.py', 'eager-on')}"
    )


def test_an_op_raising_on_xla_is_a_recorded_error_with_transformers_line(zoo) -> None:
    record = zoo[1][
        ("mixtral", "train")
    ]  # histc has no XLA lowering; the CPU's histc has no int kernel
    assert record["status"] == "fallback-error" and record["phase"] == "step 0"
    assert (
        record["reason"].startswith("CPU fallback of aten::histc raised:")
        and "histogram_cpu" in record["reason"]
    )
    assert record["fallback_ops"] == ["aten::histc"]
    assert record["where"].startswith("transformers/integrations/moe.py:")


def test_an_moe_whose_experts_kernel_fails_runs_again_with_the_documented_switch(zoo) -> None:
    record = zoo[1][
        ("mixtral", "train+batched_mm")
    ]  # model.set_experts_implementation("batched_mm")
    assert (
        record["status"] == "ok"
        and record["experts"] == "batched_mm"
        and record["base_scenario"] == "train"
    )
    assert record["truth"]["fallbacks"] == {} and record["truth"]["uncached"][2:] == [0, 0]
    assert rules(record) == [] and record["run_id"].startswith("zoo-mixtral-train-batched_mm-")
    assert (
        cell.workaround(zoo[1][("mixtral", "train")]) == "batched_mm"
        and cell.workaround(record) is None
    )
    assert (
        cell.workaround(zoo[1][("jetmoe", "train")]) is None
    )  # a crash elsewhere is not the kernel's
    rows = [table.row(r) for r in zoo[1].values()]
    assert table.coverage(rows, ("train",)) == {
        "model_types": 5,
        "ran_all_default": 2,
        "ran_all_with_workaround": 3,
    }


def test_a_process_that_aborts_is_a_recorded_crash(zoo) -> None:
    record = zoo[1][("jetmoe", "train")]
    assert (
        record["status"] == "crash"
        and record["exit_code"] < 0
        and "Check failed" in record["reason"]
    )


def test_resume_skips_finished_cells(zoo) -> None:
    store, records = zoo
    runs_before = sorted(p.name for p in store.iterdir() if p.name.startswith("zoo-"))
    proc = _sweep(
        store, "--task", "causal-lm", "--scenario", "train", "--only", "llama", "--only", "mixtral"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in store.iterdir() if p.name.startswith("zoo-")) == runs_before
    cells = json.loads(proc.stdout)["cells"]
    assert {(c["model_type"], c["scenario"], c["status"]) for c in cells} == {
        ("llama", "train", "ok"),
        ("mixtral", "train", "fallback-error"),
        ("mixtral", "train+batched_mm", "ok"),
    }


def test_an_earlier_stores_cells_are_finished_and_join_the_table(zoo, tmp_path: Path) -> None:
    # a machine here is not kept: the next session resumes from the committed cells.csv alone
    store, _ = zoo
    earlier = table.write_outputs(store) / "cells.csv"
    fresh = tmp_path / "fresh-store"
    args = ("--task", "causal-lm", "--scenario", "train", "--only", "llama", "--only", "mixtral")
    proc = _sweep(fresh, *args, "--earlier", str(earlier))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not any(fresh.glob("zoo-*"))  # nothing ran again
    cells = json.loads(proc.stdout)["cells"]
    assert {(c["model_type"], c["scenario"], c["status"]) for c in cells} >= {
        ("llama", "train", "ok"),
        ("mixtral", "train", "fallback-error"),
        ("mixtral", "train+batched_mm", "ok"),
    }


def test_coverage_is_per_family_over_the_scenarios_that_fit_it() -> None:
    def cell(model_type: str, task: str, scenario: str, status: str = "ok") -> dict[str, Any]:
        return {"model_type": model_type, "task": task, "scenario": scenario, "status": status}

    rows = [
        cell("llama", "causal-lm", "train"),
        cell("llama", "causal-lm", "generate"),
        cell("albert", "masked-lm", "train"),  # a masked LM has no generate: train is all it needs
        cell("t5", "seq2seq", "train"),
        cell("t5", "seq2seq", "generate", "error"),
    ]
    by_task = table.coverage_by_task(rows)
    assert by_task["causal-lm"]["ran_all_default"] == 1
    assert by_task["masked-lm"] == {
        "scenarios": ["train"],
        "model_types": 1,
        "ran_all_default": 1,
        "ran_all_with_workaround": 1,
    }
    assert by_task["seq2seq"]["ran_all_default"] == 0 and by_task["seq2seq"]["model_types"] == 1


def test_a_hanging_cell_times_out_as_a_result(tmp_path: Path) -> None:
    entry = catalog.Entry("llama", "causal-lm", "LlamaForCausalLM")
    record = run_cell(entry, "train", tmp_path, timeout=2)
    assert record["status"] == "timeout" and "2 s" in record["reason"]
    assert (
        json.loads((tmp_path / "zoo" / "cells" / "llama.train.json").read_text())["status"]
        == "timeout"
    )


def test_the_table_outputs_and_duckdb(zoo) -> None:
    import duckdb

    store, records = zoo
    folder = table.write_outputs(store)
    text = (folder / "table.md").read_text()
    assert "0 disagreements" in text and "| gpt2 | generate | ok |" in text
    rows = duckdb.sql(
        f"SELECT model_type, status, agrees FROM '{folder / 'cells.parquet'}' "
        "ORDER BY model_type, scenario"
    ).fetchall()
    assert rows == [
        ("bart", "ok", True),
        ("gpt2", "ok", True),
        ("jetmoe", "crash", None),
        ("llama", "ok", True),
        ("llama", "ok", True),
        ("mixtral", "fallback-error", None),
        ("mixtral", "ok", True),
    ]
    summary = table.summarize(list(records.values()))
    assert summary["judged"] == 5 and summary["disagreements"] == 0 and summary["cells"] == 7
    # a store that is not kept (another machine's, an earlier session's) joins by its cells.csv:
    # the CSV read back is the same table, and the store's own cells win over the earlier ones
    earlier = table.load_earlier(folder / "cells.csv")
    assert table.markdown([], earlier) == text
    assert table.markdown([next(iter(records.values()))], earlier) == text


def _line(program: str, name: str) -> int:
    text = (Path(configs.__file__).parent / "programs" / program).read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if line.rstrip().endswith(f"# zoo: {name}"))


def test_the_dashboard_zoo_page_lists_every_cell_linking_its_run(zoo) -> None:
    from tpuscope.dashboards.app import route
    from tpuscope.dashboards.data import StoreData

    store, records = zoo
    page = route(StoreData(str(store)), "/zoo")
    grid = next(c for c in page.children if getattr(c, "id", None) == "zoo-grid")
    rows = {r["link"]: r for r in grid.rowData}
    assert set(rows) == {f"{t}/{s}" for t, s in SUBSET} | {"mixtral/train+batched_mm"}
    assert (
        rows["llama/train"]["run_id"] == records[("llama", "train")]["run_id"]
    )  # RunLink's target
    assert rows["llama/train"]["agrees"] == "yes" and rows["jetmoe/train"]["status"] == "crash"
    assert "0 disagreements" in page.children[0].children[1].children


@pytest.mark.parametrize("listing", [True, False], ids=["list", "run"])
def test_an_only_pattern_that_matches_no_model_type_is_refused(
    tmp_path: Path, listing: bool
) -> None:
    """A typo must not list, or run, nothing with exit 0: exit 2 naming the closest types, and no
    cell run; a comma-separated list is several patterns."""
    store = tmp_path / "store"
    extra = ("--list",) if listing else ()
    proc = _sweep(store, "--only", "lama", "--only", "nosuchmodel", *extra)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--only 'lama' matches no model type; closest: llama" in proc.stderr
    assert "--only 'nosuchmodel' matches no model type; `tpuscope sweep --list`" in proc.stderr
    assert not store.exists()  # refused before anything was made
    if listing:
        listed = _sweep(store, "--only", "gpt2,llama", "--scenario", "train", "--list")
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert [line.split("\t")[:2] for line in listed.stdout.splitlines()] == [
            ["gpt2", "train"],
            ["llama", "train"],
        ]
