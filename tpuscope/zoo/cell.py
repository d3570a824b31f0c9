"""One zoo cell: a model type x scenario as one tpuscope run in a fresh process, with a timeout.

The scenario's program is copied into the cell's folder (<store>/zoo/work/<type>.<scenario>/) and
run as `python3 -m tpuscope run --name zoo/<type>/<scenario> python <program> ...`, with
ZOO_TRUTH naming the file its in-process counters go to. Whatever happens (a crash, a hang, an
op that raises on XLA, a config too big) the cell ends as a record with a status and a reason
(an error is run again on the plain CPU: `error` when only XLA fails, `fails-on-cpu-too` when
the model or its tiny config fails anyway)
(<store>/zoo/cells/<type>.<scenario>.json): never an exception out of the sweep. A finished
cell's record carries the truth, what tpuscope said and whether they agree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tpuscope.collect.xla.shapes import without_dump_flags
from tpuscope.zoo import agree, scenarios
from tpuscope.zoo.catalog import Entry
from tpuscope.zoo.truthread import CellTruth

_NEEDS_PACKAGE = re.compile(r"requires the \S+ library")
PROGRAMS = Path(__file__).resolve().parent / "programs"
_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the tpuscope package


WORKAROUND_EXPERTS = (
    "batched_mm"  # transformers' static-shape experts kernel (no histc, no nonzero)
)
_EXPERTS_KERNEL = "transformers/integrations/moe.py"


def cell_key(model_type: str, scenario: str) -> str:
    return f"{model_type}.{scenario}"


def variant(scenario: str, experts: str | None) -> str:
    """The cell's scenario label: `train`, or `train+batched_mm` for a run with another experts kernel."""
    return f"{scenario}+{experts}" if experts else scenario


def workaround(record: dict[str, Any] | None) -> str | None:
    """The experts implementation to run a failed default cell again with, or None.

    The rule: a default cell that failed inside transformers' experts kernel (integrations/moe.py,
    the histc of every `use_experts_implementation` MoE) is run again as a user would then run it,
    with `model.set_experts_implementation("batched_mm")` (transformers' documented switch), so the
    type's other findings are known; the default's failure stays its own cell."""
    if (
        not record
        or record.get("experts")
        or record.get("status") not in ("error", "fallback-error")
    ):
        return None
    return (
        WORKAROUND_EXPERTS if str(record.get("where") or "").startswith(_EXPERTS_KERNEL) else None
    )


def record_path(store: Path, model_type: str, scenario: str) -> Path:
    return Path(store) / "zoo" / "cells" / f"{cell_key(model_type, scenario)}.json"


def _env(truth: Path, experts: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "ZOO_TRUTH": str(truth)}
    for name in ("PT_XLA_DEBUG_LEVEL", "XLA_FLAGS", "TPUSCOPE_STORE", "ZOO_EXPERTS"):
        env.pop(name, None)
    flags = without_dump_flags(os.environ.get("XLA_FLAGS", ""))  # the caller's compile flags
    if flags:  # stay; a dump flag would take the cell's dump from tpuscope
        env["XLA_FLAGS"] = flags
    if experts:
        env["ZOO_EXPERTS"] = experts
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """(exit code or None on timeout, stderr's tail); a timed-out cell's process group is killed."""
    with open(cwd / "stderr.txt", "w") as err, open(cwd / "stdout.txt", "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, (cwd / "stderr.txt").read_text(errors="replace")[-4000:]


def _show(store: Path, name: str, env: dict[str, str]) -> dict[str, Any] | None:
    """`tpuscope show --json` of the newest run of this cell, with its run id."""
    prefix = (
        re.sub(r"[^A-Za-z0-9._-]+", "-", name) + "-"
    )  # the run id's form of the name (runstore)
    runs = sorted((p for p in Path(store).glob(f"{prefix}*") if p.is_dir()), key=lambda p: p.name)
    runs = [p for p in runs if p.name[len(prefix) :][:1].isdigit()]  # not a longer type's runs
    if not runs:
        return None
    proc = subprocess.run(
        [sys.executable, "-m", "tpuscope", "show", "--store", str(store), runs[-1].name, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        return {"run_id": runs[-1].name, "error": proc.stderr[-500:]}
    return {"run_id": runs[-1].name, **json.loads(proc.stdout)}


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(" ")]
    return lines[-1][:300] if lines else "no output"


def run_cell(
    entry: Entry,
    scenario_name: str,
    store: Path,
    timeout: float = 900,
    target: str = "v5e",
    experts: str | None = None,
) -> dict[str, Any]:
    """Run one cell and write its record; returns the record. `experts` runs it with that experts
    implementation (the cell `<scenario>+<experts>`, see `workaround`)."""
    scenario = scenarios.SCENARIOS[scenario_name]
    store = Path(store)
    label = variant(scenario_name, experts)
    work = store / "zoo" / "work" / cell_key(entry.model_type, label)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    program = work / scenario.program
    shutil.copy(PROGRAMS / scenario.program, program)
    truth_file = work / "truth.json"
    name = f"zoo/{entry.model_type}/{label}"
    deep = ["--deep", "--target", target] if scenario.deep else []
    cmd = [
        sys.executable,
        "-m",
        "tpuscope",
        "run",
        "--store",
        str(store),
        "--name",
        name,
        "--quiet",
        *deep,
        "--warmup",
        str(scenario.warmup),
        "python",
        program.name,
        entry.model_type,
        entry.class_name,
        entry.task,
        *scenario.args,
    ]
    env = _env(truth_file, experts)
    start = time.monotonic()
    code, stderr = _run(cmd, work, env, timeout)
    record: dict[str, Any] = {
        "model_type": entry.model_type,
        "task": entry.task,
        "class_name": entry.class_name,
        "scenario": label,
        "exit_code": code,
        **({"base_scenario": scenario_name, "experts": experts} if experts else {}),
        **({"target": target} if scenario.deep else {}),
        "seconds": round(time.monotonic() - start, 1),
    }
    truth = CellTruth.load(truth_file)
    record.update(_status(code, stderr, truth, timeout))
    shown = _show(store, name, env) if code is not None else None
    record["run_id"] = shown.get("run_id") if shown else None
    if truth and record["status"] == "ok" and shown and "summary" in shown:
        record.update(_judged(scenario, truth, shown, target))
    _write(record_path(store, entry.model_type, label), record)
    return record


def _status(
    code: int | None, stderr: str, truth: CellTruth | None, timeout: float
) -> dict[str, Any]:
    if code is None:
        return {"status": "timeout", "reason": f"no end after {timeout:.0f} s"}
    if truth is not None and truth.error:
        err = truth.error
        status, reason = err["status"], f"{err['type']}: {err['message']}"
        if err["type"] == "ImportError" and _NEEDS_PACKAGE.search(err["message"]):
            status = (
                "needs-package"  # a package this machine lacks (gemma3n's vision tower needs timm)
            )
        fallbacks = err.get("fallback_ops") or []
        if (
            status == "error" and fallbacks and "_cpu" in err["message"]
        ):  # a CPU kernel raised inside a fallback
            status, reason = (
                "fallback-error",
                f"CPU fallback of {', '.join(fallbacks)} raised: {reason}",
            )
        return {
            "status": status,
            "reason": reason,
            "phase": err["phase"],
            "where": err.get("where"),
            "cpu_error": err.get("cpu_error"),
            "fallback_ops": fallbacks,
        }
    if code != 0 or truth is None or "end" not in truth.labels:
        return {"status": "crash", "reason": f"exit {code}: {_last_error(stderr)}"}
    return {"status": "ok", "reason": ""}


def _judged(
    scenario: scenarios.Scenario, truth: CellTruth, shown: dict[str, Any], target: str
) -> dict[str, Any]:
    summary, findings = shown["summary"], shown.get("findings", [])
    expected = scenarios.expected(scenario, truth, target)
    told = agree.said(findings, summary.get("steps"))
    fallbacks = truth.fallback_calls(scenario.phase)
    return {
        "params": truth.extra.get("params"),
        "truth": {
            "uncached": truth.per_phase("UncachedCompile", scenario.phase),
            "cached": truth.per_phase("CachedCompile", scenario.phase),
            "executions": truth.per_phase("ExecuteComputation", scenario.phase),
            "reads": [truth.value_reads(g) for g in truth.groups(scenario.phase)],
            "per_token": truth.per_token_compiles(),
            "fallbacks": fallbacks,
            "static_cache": truth.extra.get("static_cache"),
            **(
                {k: truth.extra.get(k) for k in ("widths", "f32_dots", "params")}
                if scenario.deep
                else {}
            ),
        },
        "expected": expected,
        "said": told,
        "disagreements": agree.disagreements(expected, told),
        "summary": {
            k: summary.get(k)
            for k in (
                "steps",
                "compiles",
                "recompiles",
                "value_reads",
                "step_time_p50_ms",
                "compile_s",
                "findings_by_rule",
            )
        },
        "findings": [_finding(f) for f in findings],
    }


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    ev = f.get("evidence") or {}
    sites = [s.get("location") for s in ev.get("sites") or [] if isinstance(s, dict)]
    compiles = ev.get("compiles")  # a list of compiles, or a count (the compile_time card)
    causes = [
        c.get("cause")
        for c in (compiles if isinstance(compiles, list) else [])
        if isinstance(c, dict) and c.get("cause")
    ]
    return {
        "rule": f.get("rule"),
        "location": f.get("location"),
        "title": f.get("title"),
        "cause": causes[0] if causes else None,
        "op": ev.get("op"),
        "per_step": ev.get("per_step") or ev.get("reads_per_step"),
        "kinds": ev.get("kinds"),
        "sites": [s for s in sites if s][:3],
    }


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)
