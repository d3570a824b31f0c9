"""Imported traces and reports show no figure nobody measured (issue 29): no "-1", "nan", "?",
"Unknown" or share above 100% in `show`, `trace` or any dashboard page; what is unknown is said
in words or left out. A GPU trace (TensorFlow on 8 GPUs; AMD MI300 under JAX) says it is a GPU
trace and keeps only the figures that hold for a GPU (no MXU: a TPU's unit). Real files from
../shared/real_traces (SOURCES.md there)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import plotly.io
import pytest

from tests.conftest import real_trace, run_tpuscope

IMPORTS = {
    "tpu": ["xplane/tpu_inference_2.xplane.pb"],
    "gpu": ["xplane/34.83.195.179_6003.xplane.pb"],
    "mi300": ["xplane/tracelens_mi300_jax/jax08_gemm__tw003.xplane.pb"],
    "report": ["metrics_reports/cail2020_htfltpu_bert_8core_xrt.metrics_report.txt"],
    "debug": [
        "pt_xla_debug/pytorch_xla_troubleshooting_2023-12_auto_metrics_analysis.pt-xla-profiler.txt",
        "pt_xla_debug/pytorch_xla_troubleshooting_2024-05_parallel_loader_decoder_only.pt_xla_debug.txt",
    ],
}
# a figure nobody measured: -1 (no step), nan, "?"/"Unknown" bound; or a share above 100%
UNMEASURED = re.compile(r"(?<![\w.\-])(nan|NaN|-1|Unknown|\?-bound)(?![\w.])")
PERCENT = re.compile(r"(?<![\d.,])(\d[\d,]*(?:\.\d+)?) ?%")


def unmeasured(text: str) -> list[str]:
    shares = [
        m.group(0) for m in PERCENT.finditer(text) if float(m.group(1).replace(",", "")) > 100
    ]
    return sorted({m.group(0) for m in UNMEASURED.finditer(text)} | set(shares))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("imports")
    for name, files in IMPORTS.items():
        proc = run_tpuscope(
            "import",
            "--store",
            str(root),
            "--quiet",
            "--name",
            name,
            *(str(real_trace(f)) for f in files),
        )
        assert proc.returncode == 0, proc.stderr
    return root


def run_id(store: Path, name: str) -> str:
    return next(p.name for p in store.iterdir() if p.name.startswith(f"{name}-"))


def cli(store: Path, *args: str) -> str:
    proc = run_tpuscope(args[0], "--store", str(store), *args[1:], env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("name", IMPORTS)
def test_show_says_what_is_unknown_in_words(store: Path, name: str) -> None:
    out = cli(store, "show", run_id(store, name))
    assert unmeasured(out) == [], out
    assert "steps" in out and " 0 (0 timed" not in out  # no step count of 0 for "not recorded"
    if name in ("tpu", "gpu", "mi300"):
        assert "none recorded" in out  # compiles: a trace does not record them


@pytest.mark.parametrize("name", ["tpu", "gpu", "mi300"])
def test_trace_shows_only_measured_figures(store: Path, name: str, tmp_path: Path) -> None:
    out = cli(store, "trace", run_id(store, name), "-o", str(tmp_path / "t.json.gz"))
    assert unmeasured(out) == [], out


@pytest.mark.parametrize("name", ["gpu", "mi300"])
def test_a_gpu_trace_says_so_and_is_not_judged_as_a_tpu(
    store: Path, name: str, tmp_path: Path
) -> None:
    report = cli(store, "show", run_id(store, name))
    assert re.search(r"profiler trace on (AMD )?GPU", report), report
    assert "MXU" not in report and "TensorCore" not in report
    view = json.loads(
        cli(store, "trace", run_id(store, name), "--json", "-o", str(tmp_path / "t.json.gz"))
    )
    figures = {k for host in view["xprof"] for k in host}
    assert not figures & {"mxu_utilization_percent", "hbm_utilization_percent"}, figures
    assert all(op.get("bound_by") not in ("?", "Unknown") for op in view["top_ops"])


def _texts(node: Any, out: list[str]) -> list[str]:
    """Every string a page shows (ids, class names, styles and links are not shown)."""
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key not in ("id", "className", "style", "href", "type", "columnDefs", "colorscale"):
                _texts(value, out)
    elif isinstance(node, list):
        for value in node:
            _texts(value, out)
    return out


def test_no_dashboard_page_shows_an_unmeasured_figure(store: Path) -> None:
    from tpuscope.dashboards.app import RUN_PAGES, route
    from tpuscope.dashboards.data import StoreData

    data = StoreData(str(store))
    pages = ["/"] + [
        f"/run/{run_id(store, name)}" + (f"/{tab}" if tab else "")
        for name in IMPORTS
        for tab in RUN_PAGES
    ]
    for page in pages:
        shown = _texts(json.loads(plotly.io.json.to_json_plotly(route(data, page))), [])
        assert "Not found" not in shown and not any(t.startswith("cannot show") for t in shown), (
            page
        )
        bad = [t[:200] for t in shown if unmeasured(t)]
        assert bad == [], (page, bad)


def _stats(node: Any, out: dict[str, Any]) -> dict[str, Any]:
    """The headline tiles of a page: stat id -> the value shown."""
    if isinstance(node, dict):
        props = node.get("props", {})
        if isinstance(props, dict) and str(props.get("id", "")).startswith("stat-"):
            out[props["id"]] = props.get("children")
        for value in node.values():
            _stats(value, out)
    elif isinstance(node, list):
        for value in node:
            _stats(value, out)
    return out


def test_the_overview_says_in_words_what_an_import_did_not_record(store: Path) -> None:
    from tpuscope.dashboards.app import route
    from tpuscope.dashboards.data import StoreData

    data = StoreData(str(store))
    for name, steps in (("gpu", "not recorded"), ("report", "3,603")):
        page = json.loads(plotly.io.json.to_json_plotly(route(data, f"/run/{run_id(store, name)}")))
        values = _stats(page, {})
        assert values["stat-steps"] == steps, (name, values)
        assert values["stat-p50"] == "not recorded"
