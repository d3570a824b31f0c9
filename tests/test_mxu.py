"""MXU arithmetic per TPU generation, and `tensorcore_underuse` on a real head_dim-64 transformer run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import EXAMPLES, run_tpuscope
from tpuscope.analyze import mxu
from tpuscope.analyze.tensorcore import tensorcore_problems
from tpuscope.detect import RunTables
from tpuscope.detect.run_analysis import analyze
from tpuscope.detect.tensorcore import detect_tensorcore_underuse
from tpuscope.store import Run

# The same arguments as tests/test_trace_capture.py: example_run makes this run once per session.
HD64_ARGS = ("--steps", "5", "--seq", "128", "--d-model", "128", "--batch", "2", "--vocab", "128")
HD64_TPUSCOPE = ("--deep", "--trace-steps", "2:4")


def _line_of(text: str) -> int:
    lines = (EXAMPLES / "transformer_head_dim64.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_padding_waste_per_generation() -> None:
    assert mxu.padding_waste(128, 64, mxu.chip("v5e").mxu) == pytest.approx(
        0.5
    )  # K=64: half of each pass
    assert mxu.padding_waste(256, 64, mxu.chip("v6e").mxu) == pytest.approx(
        0.75
    )  # three quarters on v6e
    assert mxu.padding_waste(64, 64, 128) == pytest.approx(0.75)
    assert mxu.padding_waste(384, 640, 128) == pytest.approx(0.0)
    assert mxu.padding_waste(384, 640, 256) == pytest.approx(1 - 384 * 640 / (512 * 768))


def test_generation_table_and_names() -> None:
    assert {g: mxu.GENERATIONS[g].mxu for g in mxu.GENERATIONS} == {
        "v4": 128,
        "v5e": 128,
        "v5p": 128,
        "v6e": 256,
        "v7": 256,
    }
    assert mxu.chip("v6e").peak_flops == 918e12 and mxu.chip("TPU-v5e").hbm_bandwidth == 819e9
    with pytest.raises(ValueError, match="unknown TPU target 'v9'"):
        mxu.chip("v9")
    names = {
        "TPU v6 Lite": "v6e",
        "TPU v5 lite": "v5e",
        "TPU v5": "v5p",
        "TPU v4": "v4",
        "TPU7x": "v7",
        "AMD GPU - gfx942": None,
    }
    assert {name: mxu.generation_of(name) for name in names} == names


def _dots(rows: list[tuple[int, int, int, int, str, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "module": "g",
                "stage": "before_optimizations",
                "name": f"dot.{i}",
                "opcode": "dot",
                "batch": b,
                "m": m,
                "n": n,
                "k": k,
                "lhs_dtype": dt,
                "rhs_dtype": dt,
                "dtype": dt,
                "precision": prec,
                "flops": 2.0 * b * m * n * k,
                "source_file": "model.py",
                "source_line": 80 + i,
            }
            for i, (b, m, n, k, dt, prec) in enumerate(rows)
        ]
    )


def test_costs_precision_passes_and_roofline() -> None:
    big = _dots(
        [
            (1, 8192, 8192, 8192, "f32", "default"),
            (1, 8192, 8192, 8192, "f32", "highest"),
            (1, 8192, 8192, 8192, "bf16", "default"),
        ]
    )
    costs = mxu.mxu_costs(big, "v5e")
    assert costs["mxu_s"][1] == pytest.approx(6 * costs["mxu_s"][0])  # highest: 6 bf16 passes
    assert costs["mxu_s"][0] == pytest.approx(2 * 8192**3 / 197e12)
    assert costs["f32_extra_s"][1] > 0 and costs["f32_extra_s"][2] == 0
    line = mxu.roofline(pd.DataFrame(), costs, "v5e").iloc[0]
    assert line["bound"] == "compute (MXU)" and line["padding_share"] == 0


def test_attention_head_dims_against_mxu_width() -> None:
    def attention(head_dim: int) -> pd.DataFrame:  # q @ k^T then weights @ v, batch x heads = 64
        return _dots(
            [
                (64, 1024, 1024, head_dim, "bf16", "default"),
                (64, 1024, head_dim, 1024, "bf16", "default"),
                (1, 4096, 4096, 1024, "bf16", "default"),
            ]
        )

    problems, _ = tensorcore_problems(attention(64), pd.DataFrame(), "v5e")
    head = next(p for p in problems if p.kind == "head_dim")
    assert (
        head.info["head_dim"] == 64
        and head.info["count"] == 2
        and head.info["location"] == "model.py:80"
    )
    assert not [
        p
        for p in tensorcore_problems(attention(128), pd.DataFrame(), "v5e")[0]
        if p.kind == "head_dim"
    ]
    on_v6e = tensorcore_problems(attention(128), pd.DataFrame(), "v6e")[0]
    assert [p.info["head_dim"] for p in on_v6e if p.kind == "head_dim"] == [128]  # 256-wide MXU


@pytest.fixture(scope="module")
def hd64_run(example_run) -> Path:
    run_dir, proc = example_run(
        "transformer_head_dim64.py", *HD64_ARGS, tpuscope_args=HD64_TPUSCOPE
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_head_dim64_transformer_findings_name_the_line(hd64_run: Path) -> None:
    report = analyze(Run(hd64_run))
    [card] = [
        f
        for f in report.findings
        if f.rule == "tensorcore_underuse"  # one graph, one card
        and f.evidence["basis"] == "estimated"
    ]
    found = {facet["kind"]: facet for facet in card.evidence["facets"]}
    head = found["head_dim"]
    assert head["head_dim"] == 64 and head["basis"] == "estimated"
    where = f"{EXAMPLES / 'transformer_head_dim64.py'}:{_line_of('scores = q @ k')}"
    assert head["location"] == where  # the user's line, not torch's
    # every facet is located in the user's file (nn.Linear calls at their caller's line, from the
    # stack XLA keeps in the .hlo.pb); the card leads with its costliest facet's line
    assert all(
        f["location"].startswith(str(EXAMPLES / "transformer_head_dim64.py"))
        for f in found.values()
    )
    assert card.location == card.evidence["facets"][0]["location"]
    # [128,64]@[64,128] and [128,128]@[128,64]: K or N of 64 pads to 128 on v5e; on v6e both the 64 and
    # the 128 (seq) pad to 256
    assert head["padding_share_by_generation"]["v5e"] == pytest.approx(0.5)
    assert head["padding_share_by_generation"]["v6e"] == pytest.approx(1 - 128 * 64 / 256**2)
    assert "head_dim 128" in head["fix"] and "v5e" in head["title"]
    assert (
        found["f32"]["fix"].startswith("Run the model in bf16")
        and "Run the model in bf16" in card.fix
    )
    dots = Run(hd64_run).hlo_ops.query("opcode == 'dot' and stage == 'before_optimizations'")
    scores = dots[dots["source_line"] == _line_of("scores = q @ k")]
    # batch 2 x 2 heads of 64 (d_model 128): q @ k^T is 4 x [128,64] @ [64,128]
    assert set(zip(scores["batch"], scores["m"], scores["n"], scores["k"], strict=True)) == {
        (4, 128, 128, 64)
    }


def test_deep_keeps_only_what_tpuscope_reads(hd64_run: Path) -> None:
    """`--deep` leaves the module texts it parsed and the .hlo.pb beside each (the frames the
    test above reads), not XLA's LLVM IR, object code and other passes (issue 29)."""
    kept = [p.name for p in (hd64_run / "hlo").iterdir()]
    assert any(n.endswith(".hlo.pb") for n in kept) and any(
        n.endswith("before_optimizations.txt") for n in kept
    )
    assert all(
        n.endswith(("before_optimizations.txt", "after_optimizations.txt", ".hlo.pb")) for n in kept
    ), kept


def test_target_v6e_flags_128_wide_dims(hd64_run: Path) -> None:
    run = Run(hd64_run)
    tables = RunTables.from_run(run)
    tables.meta = {**tables.meta, "target": "v6e"}
    [card] = [f for f in detect_tensorcore_underuse(tables) if f.evidence["basis"] == "estimated"]
    found = {facet["kind"]: facet for facet in card.evidence["facets"]}
    assert (
        found["head_dim"]["target"] == "v6e" and "88% of its MXU work" in found["head_dim"]["title"]
    )
    problems, summary = tensorcore_problems(run.hlo_ops, run.hlo_modules, "v6e")
    unaligned = next(
        p for p in problems if p.kind == "unaligned"
    )  # d_model 128, 3*128 on a 256 MXU
    assert unaligned.info["dims"] == [128, 384] and unaligned.info["padded"] == [256, 512]
    assert (
        summary["padding_share"]
        > tensorcore_problems(run.hlo_ops, run.hlo_modules, "v5e")[1]["padding_share"]
    )
    # this tiny graph is HBM-bound on v6e: padding costs no step time, so no unaligned finding
    assert unaligned.cost_s == 0 and "unaligned" not in found


def test_bad_target_and_trace_steps_are_usage_errors(tmp_path: Path) -> None:
    for option, value, words in (
        ("--target", "v9", "unknown TPU target"),
        ("--trace-steps", "5:2", "START < STOP"),
    ):
        proc = run_tpuscope("run", "--store", str(tmp_path), option, value, "python", "-c", "pass")
        assert (
            proc.returncode == 2 and words in proc.stderr and proc.stderr.startswith("tpuscope: ")
        )
    assert not list(tmp_path.iterdir())  # no half-made run
