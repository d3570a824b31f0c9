"""The JAX collector's whole path: examples/jax_train.py under `tpuscope run` (sitecustomize ->
post-import hook -> store -> report), and the golden sample trace's expected findings."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

import tpuscope  # noqa: E402
from tests.conftest import ROOT, run_tpuscope  # noqa: E402
from tpuscope.detect import RunTables  # noqa: E402

# -- the example, end to end through `tpuscope run` ----------------------------------------


def test_example_under_tpuscope_run_shows_the_retrace(example_run) -> None:
    pytest.importorskip("flax")
    run_dir, proc = example_run("jax_train.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "epoch 1: mean loss" in proc.stdout  # the program's own output is untouched
    run = tpuscope.load_run(run_dir)
    assert run.meta["processes"][0]["backend"] == "jax"
    steps = run.steps
    assert len(steps) == 14 and set(steps["boundary"]) == {"jit:train_step"}
    after_warmup = run.compiles[run.compiles["step"] >= 2]
    assert len(after_warmup) == 1
    retrace = after_warmup.iloc[0]
    assert retrace["step"] == 6
    assert retrace["cause"].startswith(
        "retrace of train_step: arg batch['x']: f32[32,64] -> f32[8,64]"
    )
    example = (ROOT / "examples" / "jax_train.py").read_text().splitlines()
    call = next(i + 1 for i, line in enumerate(example) if "= train_step(state, batch)" in line)
    assert retrace["location"] == f"{ROOT / 'examples' / 'jax_train.py'}:{call}"
    assert "f32[8,64]" in list(retrace["input_shapes"])
    shown = run_tpuscope("show", run_dir.name, "--store", str(run_dir.parent))
    assert shown.returncode == 0, shown.stderr
    assert "retrace of" in shown.stdout and "train_step" in shown.stdout


# -- the sample trace (golden) -------------------------------------------------------------


def test_sample_trace_jax_retrace_gives_its_expected_findings() -> None:
    import json

    from tpuscope.detect import detect

    folder = ROOT / "sample_traces" / "jax_retrace"
    expected = json.loads((folder / "expected_findings.json").read_text())
    run = tpuscope.load_run(folder)
    findings = detect(RunTables.from_run(run))
    rules = {f.rule for f in findings}
    for want in expected["findings"]:
        found = [f for f in findings if f.rule == want["rule"]]
        assert found, f"no {want['rule']} finding: {rules}"
        finding = found[0]
        assert finding.severity == want["severity"]
        assert (finding.location or "").endswith(want["location_endswith"])
        assert finding.step_runs == want["step_runs"]
        text = f"{finding.title} {finding.detail} {json.dumps(finding.to_dict()['evidence'])}"
        assert all(piece in text for piece in want["text_contains"]), text
    assert rules <= {w["rule"] for w in expected["findings"]} | set(expected["allowed"])
    assert not rules & set(expected["absent"])
    tables = expected["tables"]
    assert len(run.steps) == tables["steps"]
    from tpuscope.analyze.families import graph_families, process_backends

    families = graph_families(run.compiles, process_backends(run.meta))
    assert int(families["recompile"].sum()) == tables["recompiles"]
    got = run.retraces.to_dict("records")
    for want in tables["retraces"]:
        assert any(all(row.get(k) == v for k, v in want.items()) for row in got), want
