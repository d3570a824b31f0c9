"""Run a benchmark: one fresh worker process per (repeat, backend, mode), then the statistics.

Processes run one at a time (parallel runs would measure each other) and in
round-robin order — repeat 1 of every mode, then repeat 2 of every mode — so a
slow drift of the machine (another job, heat) spreads over all modes instead of
landing on one. What cannot run here is found before any process starts and
reported with its reason.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuscope.bench import stats
from tpuscope.bench.modes import precheck
from tpuscope.bench.spec import WorkerSpec
from tpuscope.launch.env import tpu_present

Progress = Callable[[WorkerSpec, int, int], None]


@dataclass
class BenchPlan:
    """What the user asked for; `model` is the script reference's stem when `script` is set."""

    model: str
    modes: list[str]
    backends: list[str]
    size: str = "small"
    steps: int = 20
    warmup: int = 3
    repeats: int = 3
    store: str = "./tpuscope-runs"
    seed: int = 0
    script: str | None = None
    timeout_s: float = 1800.0
    command: str | None = None  # the command line that asked for it, kept in each run's meta
    group: str = field(
        default_factory=lambda: f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    )


@dataclass
class BenchResult:
    group: str
    rows: list[dict[str, Any]]  # one per (backend, mode), with the comparison to strict
    raw: list[dict[str, Any]]  # one per worker process
    env_set: dict[str, str]
    seconds: float

    def to_list(self) -> list[dict[str, Any]]:
        return [{**row, "bench_group": self.group} for row in self.rows]


def worker_env() -> tuple[dict[str, str], dict[str, str]]:
    """(environment for the workers, the variables tpuscope set in it); the user's own stay."""
    env = dict(os.environ)
    set_here: dict[str, str] = {}
    if not tpu_present() and "PJRT_DEVICE" not in env:
        env["PJRT_DEVICE"] = set_here["PJRT_DEVICE"] = "CPU"
    return env, set_here


def plan_specs(plan: BenchPlan, env_set: dict[str, str]) -> list[WorkerSpec]:
    """Round-robin order: every (backend, mode) once per repeat."""
    return [
        WorkerSpec(
            backend=backend,
            mode=mode,
            model=plan.model,
            size=plan.size,
            steps=plan.steps,
            warmup=plan.warmup,
            repeat=r,
            seed=plan.seed,
            store=str(Path(plan.store).resolve()),
            group=plan.group,
            script=plan.script,
            extra_meta={
                "env_set": env_set,
                "bench_repeats": plan.repeats,
                "command": plan.command or f"tpuscope bench --model {plan.model}",
            },
        )
        for r in range(plan.repeats)
        for backend in plan.backends
        for mode in plan.modes
    ]


def run_spec(spec: WorkerSpec, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Run one worker process and read its result; a crash becomes an error result."""
    base = {
        "backend": spec.backend,
        "mode": spec.mode,
        "model": spec.model,
        "size": spec.size,
        "repeat": spec.repeat,
        "steps": spec.steps,
        "warmup": spec.warmup,
    }
    with tempfile.TemporaryDirectory(prefix="tpuscope-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "tpuscope.bench.worker",
            "--spec",
            spec.to_json(),
            "--out",
            str(out),
        ]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {**base, "status": "error", "error": f"timed out after {timeout_s:.0f} s"}
        if out.is_file():
            return json.loads(out.read_text())
        tail = [line for line in (proc.stderr or "").splitlines() if line.strip()][-1:] or [
            "no output"
        ]
        return {
            **base,
            "status": "error",
            "error": f"worker exited with {proc.returncode}: {tail[0][:300]}",
        }


def run_bench(plan: BenchPlan, progress: Progress | None = None) -> BenchResult:
    """Measure every (backend, mode) of the plan `repeats` times; rows in the plan's order."""
    started = time.perf_counter()
    env, env_set = worker_env()
    specs = plan_specs(plan, env_set)
    runnable = [s for s in specs if precheck(s.backend, s.mode, s.model, s.script) is None]
    raw: list[dict[str, Any]] = []
    for done, spec in enumerate(runnable):
        if progress is not None:
            progress(spec, done, len(runnable))
        raw.append(run_spec(spec, env, plan.timeout_s))
    if progress is not None and runnable:
        progress(runnable[-1], len(runnable), len(runnable))
    rows = []
    for backend in plan.backends:
        for mode in plan.modes:
            results = [r for r in raw if r["backend"] == backend and r["mode"] == mode]
            reason = precheck(backend, mode, plan.model, plan.script)
            if reason:
                results = [
                    {
                        "backend": backend,
                        "mode": mode,
                        "model": plan.model,
                        "size": plan.size,
                        "steps": plan.steps,
                        "warmup": plan.warmup,
                        "status": "unavailable",
                        "reason": reason,
                    }
                ]
            rows.append(stats.aggregate(results))
    return BenchResult(
        group=plan.group,
        rows=stats.with_comparisons(rows),
        raw=raw,
        env_set=env_set,
        seconds=time.perf_counter() - started,
    )
