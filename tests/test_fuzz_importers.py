"""Fuzz every text importer and the live PT_XLA_DEBUG tail with mutated real files.

Seeds are the real metrics reports, PT_XLA_DEBUG logs and small HLO texts in
../shared/real_traces; mutations (deterministic seed) put numbers beyond int64, malformed
numbers, cut, doubled, dropped and shuffled lines and stray bytes into them. Each case must
either be refused by name (ImportRefused) or give rows that the store really writes and
reads back; the live tail, fed the same text in random pieces, must never raise. Bounded:
a few seconds.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.conftest import real_trace
from tpuscope.ingest import registry
from tpuscope.ingest.registry import ImportRefused
from tpuscope.parse.pt_xla_debug import DebugFileTail, DebugParser
from tpuscope.store.buffer import PartWriter
from tpuscope.store.parts import read_table

SEEDS = [
    "metrics_reports/cail2020_htfltpu_bert_8core_xrt.metrics_report.txt",
    "metrics_reports/fastai_xla_extensions_XLA_run_debug_base_grid_sample_tpu_xrt.metrics_report.txt",
    "metrics_reports/pytorch_xla_einsum_investigation_notebook.metrics_report.txt",
    "metrics_reports/partial_or_variant/pytorch_xla_TROUBLESHOOTING_2019_CompileTime_old_Counter_label.fragment.txt",
    "metrics_reports/partial_or_variant/ratex_lazy_tensor_core_RAFCompile.variant_metrics_report.txt",
    "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_user_mark_step_imagenet.pt_xla_debug.txt",
    "pt_xla_debug/pytorch_xla_troubleshooting_2024-05_parallel_loader_decoder_only.pt_xla_debug.txt",
    "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_auto_metrics_analysis.pt-xla-profiler.txt",
    "hlo/graphhelper_torch_neuronx/misc_sharding_megatron-lm.hlo.txt",
]
CASES_PER_SEED = 60
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ODD_NUMBERS = [
    "99999999999999999999",
    "-99999999999999999999",
    "1.2.3",
    "nan",
    "inf",
    "x",
    "",
    "0" * 40,
    "1e999",
    "-1",
]


def mutate(text: str, rng: random.Random) -> str:
    """One to three random damages of the kinds real logs show (or fuzzing found)."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        lines = text.split("\n")
        if kind == 0 and (numbers := list(_NUMBER.finditer(text))):
            hit = rng.choice(numbers)
            text = text[: hit.start()] + rng.choice(_ODD_NUMBERS) + text[hit.end() :]
        elif kind == 1:
            text = text[: rng.randrange(len(text) + 1)]
        elif kind == 2 and lines:
            i = rng.randrange(len(lines))
            text = "\n".join(lines[:i] + [lines[i]] * rng.randint(2, 4) + lines[i + 1 :])
        elif kind == 3 and lines:
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif kind == 4 and len(lines) > 1:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        else:
            at = rng.randrange(len(text) + 1)
            text = (
                text[:at]
                + rng.choice([":", "=", "%", "\x00", "\ufffd", "  ", ";", "\r"])
                + text[at:]
            )
    return text


def check_import(path: Path, run_dir: Path, index: int) -> bool:
    """True if imported (and written and read back whole), False if refused by name."""
    run_dir = run_dir / str(index)
    run_dir.mkdir()
    try:
        results = registry.load(path)
    except ImportRefused as exc:
        assert str(exc), path
        return False
    writer = PartWriter(run_dir, tag=f"case-{index}")
    expected: dict[str, int] = {}
    for _, evidence in results:
        for table, rows in evidence.rows.items():
            writer.extend(table, rows)
            expected[table] = expected.get(table, 0) + len(rows)
    writer.flush()
    for table, count in expected.items():
        written = read_table(run_dir, table)
        assert written.num_rows == count
    return True


def feed_live(text: str, rng: random.Random, path: Path) -> None:
    """The tail as the collector runs it: the file grows in random pieces, polled in between."""
    path.write_bytes(b"")
    tail = DebugFileTail(path)
    data = text.encode("utf-8", errors="replace")
    at = 0
    while at < len(data):
        step = rng.randint(1, 400)
        with open(path, "ab") as handle:
            handle.write(data[at : at + step])
        at += step
        tail.poll()
    assert not tail.failed, "the live tail hit an error it had to swallow"
    parser = DebugParser()
    parser.feed(text)  # the parser alone, whole: no exception either


@pytest.mark.parametrize("seed_file", SEEDS, ids=[Path(s).name[:40] for s in SEEDS])
def test_mutated_real_files_are_imported_or_refused_never_crash(
    seed_file: str, tmp_path: Path
) -> None:
    source = real_trace(seed_file)
    original = source.read_text(errors="replace")
    rng = random.Random(f"tpuscope-fuzz-{seed_file}")
    outcomes = {True: 0, False: 0}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cases = (
        CASES_PER_SEED // 3 if seed_file.startswith("hlo/") else CASES_PER_SEED
    )  # HLO parses slower
    for index in range(cases):
        text = mutate(original, rng)
        case = tmp_path / f"{source.stem}.{index}{source.suffix}"
        case.write_text(text, errors="replace")
        outcomes[check_import(case, run_dir, index)] += 1
        if "Analysis:" in text or "pt-xla-profiler" in text:
            feed_live(text, rng, tmp_path / "live.txt")
        case.unlink()
    assert outcomes[True] + outcomes[False] == cases
    assert outcomes[True] > 0  # most damage leaves something readable


def test_the_overflow_fuzzing_found_refuses_the_file_by_name(tmp_path: Path) -> None:
    source = real_trace(SEEDS[1]).read_text()
    bad = tmp_path / "report.txt"
    bad.write_text(source.replace("TotalSamples: 3", "TotalSamples: 99999999999999999999", 1))
    with pytest.raises(ImportRefused, match="out of range"):
        registry.load(bad)
