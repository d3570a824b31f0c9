"""Every output behind one interface (tpuscope/report/renderers.py): a renderer picked by name
returns what the command prints. On a real TPU trace imported as a run and a real torch_xla
run; the commands' own output is checked by test_run, test_ci, test_compare_gate, test_bench."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import real_trace, run_tpuscope
from tpuscope.detect.run_analysis import analyze
from tpuscope.report.device import device_view
from tpuscope.report.perfetto import write_chrome_trace
from tpuscope.report.renderers import UnknownRenderer, names, renderer_for
from tpuscope.store import Run, read_table


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    store = tmp_path_factory.mktemp("store")
    proc = run_tpuscope(
        "import",
        "--store",
        str(store),
        "--quiet",
        str(real_trace("xplane/tpu_inference_2.xplane.pb")),
    )
    assert proc.returncode == 0, proc.stderr
    return Run(next(p for p in store.iterdir() if p.is_dir()))


def test_an_unknown_name_is_refused_with_the_names_there_are() -> None:
    assert names("diff") == ["console", "json", "markdown"]
    with pytest.raises(
        UnknownRenderer, match="no 'html' renderer for report; there are: console, json"
    ):
        renderer_for("report", "html")


def test_the_perfetto_renderer_is_the_trace_file_the_command_writes(
    trace_run: Run, tmp_path: Path
) -> None:
    events = read_table(trace_run.path, "trace_events")
    rendered = renderer_for("trace", "perfetto").render(events)
    assert isinstance(rendered, bytes)
    written = write_chrome_trace(events, tmp_path / "streamed.json.gz")
    assert gzip.decompress(rendered) == gzip.decompress(
        (tmp_path / "streamed.json.gz").read_bytes()
    )
    chrome = json.loads(gzip.decompress(rendered))
    assert sum(e["ph"] == "X" for e in chrome["traceEvents"]) == written == events.num_rows > 0


def test_text_renderers_give_what_the_trace_command_prints(trace_run: Run) -> None:
    proc = run_tpuscope(
        "trace",
        "--store",
        str(trace_run.path.parent),
        trace_run.run_id,
        "--json",
        "-o",
        str(trace_run.path / "t.json.gz"),
    )
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    again = device_view(trace_run)
    again["perfetto_trace"] = view["perfetto_trace"]
    assert renderer_for("device", "json").render(again) == proc.stdout


def test_rich_renderers_return_what_the_console_would_print(example_run) -> None:
    run_dir, proc = example_run("variable_length.py", "--steps", "6")
    assert proc.returncode == 0, proc.stderr
    report = analyze(Run(run_dir))
    text = renderer_for("report", "console").render(report, Console(width=120, color_system=None))
    assert isinstance(text, str) and text.startswith("tpuscope: first: [")
    assert (
        "tpuscope report" in text
        and f"1. [{report.findings[0].severity}] {report.findings[0].rule}" in text
    )
    as_json = json.loads(renderer_for("report", "json").render(report))
    assert as_json["summary"]["run_id"] == run_dir.name
    assert [f["rule"] for f in as_json["findings"]] == [f.rule for f in report.findings]
