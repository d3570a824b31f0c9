"""Imports that never contradict themselves (issue 29): `import --help` names every format read;
a malformed number is refused whichever field holds it (`TotalSamples: abc` was stored as 0);
every file of a given folder that no reader takes is named; a folder of HloProto files is read;
and the headline counts the step markers and compiles the findings judge by. Real files from
../shared/real_traces (SOURCES.md there), altered one field at a time for the refusals."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import real_trace, run_tpuscope
from tpuscope.cli.main import main
from tpuscope.ingest import IMPORTERS

# each reader's name -> the words `import --help` names it by (a new reader fails until listed)
HELP_WORDS = {
    "metrics_report": "torch_xla metrics reports",
    "pt_xla_debug": "PT_XLA_DEBUG logs",
    "xplane": "*.xplane.pb",
    "xprof_json": "xprof tool outputs",
    "hlo_dump": "XLA HLO text",
    "hlo_proto": "*.hlo_proto.pb",
}
REPORT = "metrics_reports/cail2020_htfltpu_bert_8core_xrt.metrics_report.txt"


def imported(store: Path, *paths: Path | str, name: str = "run") -> dict:
    proc = run_tpuscope("import", "--store", str(store), "--json", "--name", name, *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_import_help_names_every_format_read() -> None:
    text = " ".join(CliRunner().invoke(main, ["import", "--help"]).output.split())
    assert {i.name for i in IMPORTERS} == set(HELP_WORDS)
    for words in HELP_WORDS.values():
        assert words in text, words


@pytest.mark.parametrize(
    ("field", "bad"), [("TotalSamples", "abc"), ("Accumulator", "garbage"), ("Value", "x12")]
)
def test_a_malformed_number_is_refused_whichever_field_holds_it(
    tmp_path: Path, field: str, bad: str
) -> None:
    lines = real_trace(REPORT).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{field}:"))
    lines[at] = re.sub(rf"{field}:.*", f"{field}: {bad}", lines[at])
    report = tmp_path / "report.txt"
    report.write_text("\n".join(lines) + "\n")
    proc = run_tpuscope("import", "--store", str(tmp_path / "store"), "--quiet", str(report))
    assert proc.returncode == 2, proc.stderr
    assert f"line {at + 1}:" in proc.stderr and repr(bad) in proc.stderr, proc.stderr


def test_every_skipped_file_of_a_folder_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "neuron"
    shutil.copytree(real_trace("hlo/graphhelper_torch_neuronx"), folder)
    (folder / "notes.md").write_text("what these graphs are\n")
    out = imported(tmp_path / "store", folder)
    skipped = {Path(s["path"]).name for s in out["skipped"]}
    assert skipped == {"MODULE_SyncTensorsGraph.21_5100071239097861191_graph.pbtxt", "notes.md"}
    assert len(out["imported"]) == 10  # the *.hlo.txt modules, each a file of its own


def test_a_folder_of_hlo_protos_is_read(tmp_path: Path) -> None:
    out = imported(tmp_path / "store", real_trace("hlo/tracelens_jax_conv_minimal_hlo_proto"))
    assert out["imported"][0]["formats"] == ["hlo_proto"] and out["skipped"] == []
    assert "8 module(s)" in out["imported"][0]["summary"]


def test_the_headline_counts_what_the_findings_judge_by(tmp_path: Path) -> None:
    report = imported(tmp_path / "store", real_trace(REPORT), name="report")
    sync = next(f for f in report["findings"] if f["rule"] == "host_sync")
    assert report["summary"]["step_markers"] == sync["evidence"]["step_markers"] == 3603
    logs = [
        real_trace(f"pt_xla_debug/{n}")
        for n in (
            "pytorch_xla_troubleshooting_2023-12_auto_metrics_analysis.pt-xla-profiler.txt",
            "pytorch_xla_troubleshooting_2023-12_user_mark_step_imagenet.pt_xla_debug.txt",
            "pytorch_xla_troubleshooting_2024-05_parallel_loader_decoder_only.pt_xla_debug.txt",
        )
    ]
    debug = imported(tmp_path / "store", *logs, name="debug")
    storm = next(f for f in debug["findings"] if f["rule"] == "recompile")
    assert debug["summary"]["compiles_counted"] == storm["evidence"]["compiles"] == 23
    assert debug["summary"]["step_markers"] == storm["evidence"]["steps"] == 12
    shown = run_tpuscope(
        "show", "--store", str(tmp_path / "store"), debug["run_id"], env={"COLUMNS": "200"}
    )
    assert (
        "23 counted in the imported files" in shown.stdout and "0 recompile(s)" not in shown.stdout
    )
    assert "12 step markers" in shown.stdout
