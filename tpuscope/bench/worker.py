"""One benchmark measurement in its own process: `python -m tpuscope.bench.worker --spec JSON --out FILE`.

The worker opens a tpuscope run (`tpuscope.profile`) *before* importing the
backend, so tpuscope's collectors hook it and the run lands in the store with its
steps and compiles like any profiled program. It then sets the mode, builds the
workload, times warm-up plus measured steps and writes the raw per-step numbers
as JSON for the harness; statistics are the harness's job.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tpuscope.bench.modes import ModeRunner, Unavailable, precheck, runner_for
from tpuscope.bench.script import ScriptError, workload_from_factory
from tpuscope.bench.spec import WorkerSpec
from tpuscope.collect import autostart
from tpuscope.detect.run_analysis import analyze
from tpuscope.launch.profile import profile
from tpuscope.store import Run


@dataclass
class Timeline:
    """Per-step raw figures, warm-up included (index = step)."""

    start_ns: list[int] = field(default_factory=list)
    wall_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)  # this process's CPU time (all threads)
    compiles: list[int] = field(default_factory=list)
    compile_ns: list[int | None] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    tokens: list[int] | None = None


def measure(runner: ModeRunner, workload: Any, total_steps: int) -> Timeline:
    """Run and time every step; the timer stops only when the device is done."""
    fn = runner.wrap(workload.step)
    timeline = Timeline(tokens=[] if workload.tokens else None)
    before = runner.compile_count()
    for i in range(total_steps):
        args = workload.inputs(i)
        timeline.start_ns.append(time.time_ns())
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        out = runner.run_step(fn, workload, args)
        runner.finish(out)
        timeline.wall_ns.append(time.perf_counter_ns() - t0)
        timeline.cpu_ns.append(time.process_time_ns() - c0)
        after = runner.compile_count()
        timeline.compiles.append(after.count - before.count)
        timeline.compile_ns.append(
            None if after.ns is None or before.ns is None else after.ns - before.ns
        )
        timeline.samples.append(workload.samples(i))
        if timeline.tokens is not None:
            timeline.tokens.append(workload.tokens(i))
        before = after
    return timeline


def _write_own_steps(run: Run, timeline: Timeline) -> None:
    """Steps rows from the bench's own timer, unless a tpuscope collector already wrote them.

    torch_xla's collector records every step boundary; backends it does not watch
    (TorchTPU today) would otherwise leave the run without steps.
    """
    session = autostart.active_session()
    if session is None:
        return
    session.flush()
    if run.has_table("steps"):
        return
    session.add_many(
        "steps",
        [
            {
                "step": i,
                "start_ns": start,
                "end_ns": start + wall,
                "wall_ns": wall,
                "boundary": "bench",
                "compiles": timeline.compiles[i],
                "compile_ns": timeline.compile_ns[i] or 0,
                "executions": None,
                "execute_ns": None,
                "fallback_ops": None,
                "transfers_from_device": None,
                "graph_hashes": None,
            }
            for i, (start, wall) in enumerate(zip(timeline.start_ns, timeline.wall_ns, strict=True))
        ],
    )


def _peak_host_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def _run_in_store(spec: WorkerSpec, result: dict[str, Any]) -> None:
    with profile(
        store=spec.store, name=spec.run_name, warmup=spec.warmup, analyze_at_exit=False
    ) as run:
        result.update(run_id=run.run_id, run_dir=str(run.path))
        run.update_meta(
            bench_mode=spec.mode,
            bench_model=spec.model,
            bench_backend=spec.backend,
            bench_group=spec.group,
            bench_repeat=spec.repeat,
            bench_size=spec.size,
            bench_steps=spec.steps,
            bench_warmup=spec.warmup,
            bench_script=spec.script,
            **spec.extra_meta,
        )
        runner = runner_for(spec.backend, spec.mode)
        total = spec.warmup + spec.steps
        if spec.script:
            workload = workload_from_factory(spec.script, runner.device())
        else:
            workload = runner.build(spec.model, spec.size, spec.seed, total)
        timeline = measure(runner, workload, total)
        _write_own_steps(run, timeline)
        memory, memory_note = runner.device_memory()
        described = runner.describe()
        run.update_meta(bench_mechanism=described.get("mechanism"), bench_workload=workload.info)
        result.update(
            status="ok",
            timeline=asdict(timeline),
            info=workload.info,
            describe=described,
            peak_device_bytes=memory,
            device_memory_note=memory_note,
        )
        result.update(_totals(runner, timeline))


def _analyze(result: dict[str, Any]) -> None:
    """Run the detectors over the stored run; a detector failing costs the findings, not the figures."""
    try:
        report = analyze(Run(result["run_dir"]))
        result["findings"] = [f"{f.severity}: {f.title}" for f in report.findings]
    except Exception as exc:
        result["analysis_error"] = f"{type(exc).__name__}: {exc}"
        print(
            f"tpuscope: analysing run {result['run_id']} failed: {result['analysis_error']}",
            file=sys.stderr,
        )


def _where(exc: BaseException, script: str | None) -> str:
    """file:line of the failure: the user's script frame when there is one, else the innermost."""
    frames = traceback.extract_tb(exc.__traceback__)
    path = script.rpartition(":")[0] if script else None
    frame = next((f for f in reversed(frames) if path and f.filename == path), frames[-1])
    return f"{Path(frame.filename).name}:{frame.lineno}"


def _totals(runner: ModeRunner, timeline: Timeline) -> dict[str, Any]:
    count = runner.compile_count()
    return {
        "compiles": sum(timeline.compiles),
        "compiles_in_process": count.count,
        "compile_ns": None if count.ns is None else sum(x or 0 for x in timeline.compile_ns),
    }


def run_worker(spec: WorkerSpec) -> dict[str, Any]:
    """Measure one spec; never raises: failures come back as status unavailable/error."""
    result: dict[str, Any] = {
        "backend": spec.backend,
        "mode": spec.mode,
        "model": spec.model,
        "size": spec.size,
        "repeat": spec.repeat,
        "steps": spec.steps,
        "warmup": spec.warmup,
        "status": "error",
    }
    reason = precheck(spec.backend, spec.mode, spec.model, spec.script)
    if reason:
        return {**result, "status": "unavailable", "reason": reason}
    try:
        _run_in_store(spec, result)
        _analyze(result)
    except Unavailable as exc:
        result.update(status="unavailable", reason=str(exc))
        if result.get("run_dir"):  # found only once the backend was imported: say so in the run
            Run(result["run_dir"]).update_meta(status="unavailable", error=str(exc))
    except ScriptError as exc:
        result.update(status="error", error=str(exc))
    except Exception as exc:  # the user's model failing in one mode must not lose the others
        result.update(
            status="error", error=f"{type(exc).__name__}: {exc} ({_where(exc, spec.script)})"
        )
    result["peak_host_bytes"] = _peak_host_bytes()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpuscope.bench.worker", description=__doc__)
    parser.add_argument("--spec", required=True, help="WorkerSpec as JSON")
    parser.add_argument("--out", required=True, type=Path, help="where to write the result JSON")
    args = parser.parse_args(argv)
    result = run_worker(WorkerSpec.from_json(args.spec))
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
