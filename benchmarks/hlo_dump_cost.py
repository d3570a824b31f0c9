"""What XLA's HLO dump costs a torch_xla compile: the price of per-graph shapes (issue 26).

tpuscope reads each compiled graph's parameter and result shapes from the first line of
XLA's `module_*.before_optimizations.txt` (tpuscope/collect/xla/shapes.py). XLA writes
that file only when it compiles, so a cached step pays nothing; a compile pays for all
XLA dumps with it. This script runs a real program in fresh processes, one per XLA_FLAGS
variant, alternating the variants round by round (the machine's load drifts), and reports
per compile: the process CPU time and wall time spent in the step markers that compiled,
torch_xla's own CompileTime, and the files and bytes XLA wrote; with `read` it also
times tpuscope's reader (parse the headers, empty the folder) after each compile step.

    python3 benchmarks/hlo_dump_cost.py examples/variable_length.py --rounds 3
    python3 benchmarks/hlo_dump_cost.py tests/corpus/corpus_hf_varlen.py --variants none,tpuscope
    python3 benchmarks/hlo_dump_cost.py examples/variable_length.py --args '--buckets 48,64'

Timing differences of a few percent drown in a shared machine's noise, so `--perf` also
samples one run with tpuscope's dump under `perf record -e cpu-clock` and sums the samples in
the dump's own code (XLA's Dump* functions, the LLVM IR / MLIR / HLO printers, the kernel's file
writes and unlinks): the dump's CPU in the same process, whatever the load.

    python3 benchmarks/hlo_dump_cost.py examples/variable_length.py --rounds 0 --perf --args '--steps 6'

Variants (XLA_FLAGS added to the program's environment):
  none      no dump (what a program without tpuscope pays)
  text      --xla_dump_to=D --xla_dump_hlo_as_text (the dump TPUSCOPE_HLO_SHAPES=1 added)
  tpuscope  what tpuscope's default mode adds now (HloDumpShapes.default_flags), read and
            emptied after every compile step as the collector does
  nometa    tpuscope's flags and --xla_dump_disable_metadata
  deep      --xla_dump_to=D --xla_dump_hlo_as_text --xla_dump_hlo_as_proto (`run --deep`)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("none", "text", "tpuscope", "nometa", "deep")


def variant_flags(variant: str, folder: Path) -> str:
    """The XLA_FLAGS of one variant (tpuscope's own comes from the collector's code)."""
    if variant == "none":
        return ""
    if variant == "tpuscope":
        sys.path.insert(0, str(ROOT))
        from tpuscope.collect.xla.shapes import default_flags

        return default_flags(folder)
    if variant == "nometa":  # tpuscope's, without op metadata in the text
        return f"{variant_flags('tpuscope', folder)} --xla_dump_disable_metadata"
    extra = " --xla_dump_hlo_as_proto" if variant == "deep" else ""
    return f"--xla_dump_to={folder} --xla_dump_hlo_as_text{extra}"


# -- inside the measured process ------------------------------------------------------------


def _inner(program: str, args: list[str], out: str, read_folder: str | None) -> None:
    """Run `program` as __main__ with the step marker timed; write the figures to `out`."""
    import runpy

    import torch_xla
    import torch_xla.debug.metrics as met

    reader = None
    if read_folder:
        sys.path.insert(0, str(ROOT))
        from tpuscope.collect.xla.shapes import HloDumpShapes

        reader = HloDumpShapes(Path(read_folder), owned=True)
    figures: dict[str, Any] = {
        "compile_steps": 0,
        "compile_cpu_s": 0.0,
        "compile_wall_s": 0.0,
        "read_cpu_s": 0.0,
        "modules_read": 0,
        "shaped": 0,
        "bytes_written": 0,
        "files_written": 0,
        "peak_files": 0,
    }
    marker = torch_xla._XLAC._xla_step_marker

    def timed_marker(*a: Any, **k: Any) -> Any:
        before = met.counter_value("UncachedCompile") or 0
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return marker(*a, **k)
        finally:
            if (met.counter_value("UncachedCompile") or 0) != before:
                figures["compile_steps"] += 1
                figures["compile_cpu_s"] += time.process_time() - cpu
                figures["compile_wall_s"] += time.perf_counter() - wall
                if reader is not None:
                    _read(reader, figures)

    torch_xla._XLAC._xla_step_marker = timed_marker
    sys.argv = [program, *args]
    sys.path.insert(0, str(Path(program).resolve().parent))
    start_cpu = time.process_time()
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            runpy.run_path(program, run_name="__main__")
        finally:
            sys.stdout = stdout
    if reader is not None:
        _read(reader, figures)  # compiles outside a step marker (a final .item())
    count, total_ns, _ = met.metric_data("CompileTime") or (0, 0, [])
    figures.update(
        process_cpu_s=time.process_time() - start_cpu,
        compiles=met.counter_value("UncachedCompile"),
        xla_compile_time_s=total_ns / 1e9,
        xla_compiles=count,
    )
    Path(out).write_text(json.dumps(figures))


def _read(reader: Any, figures: dict[str, Any]) -> None:
    """What the collector does after a compile step: poll (list, parse the new modules' first
    lines); then what its flush thread does: sweep (delete them), timed apart."""
    names = os.listdir(reader.folder) if reader.folder.is_dir() else []
    figures["peak_files"] = max(figures["peak_files"], len(names))
    figures["files_written"] += len(names)
    figures["bytes_written"] += sum(_size(reader.folder / n) for n in names)
    cpu, wall = time.process_time(), time.perf_counter()
    modules = reader.poll()
    figures["read_cpu_s"] += time.process_time() - cpu
    figures["read_wall_s"] = figures.get("read_wall_s", 0.0) + time.perf_counter() - wall
    cpu, wall = time.process_time(), time.perf_counter()
    reader.sweep()
    figures["sweep_cpu_s"] = figures.get("sweep_cpu_s", 0.0) + time.process_time() - cpu
    figures["sweep_wall_s"] = figures.get("sweep_wall_s", 0.0) + time.perf_counter() - wall
    figures["modules_read"] += len(modules)
    figures["shaped"] += sum(1 for m in modules if m.inputs)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- perf: the dump's own samples -----------------------------------------------------------

DUMP_CODE = {  # self-time symbols that run only because of the dump (perf report --sort sym)
    "LLVM IR printing": r"AssemblyWriter|SlotTracker|raw_ostream|TypePrinting|WriteAsOperand|PrintLLVMName",
    "MLIR printing": r"mlir::.*Printer|OperationPrinter|AsmPrinter::Impl|mlir::.*::print\b|printAssembly",
    "HLO printing": r"xla::.*Print|xla::.*ToString|StrAppend|StrCat",
    "XLA Dump* functions": r"xla::.*Dump",
    "kernel file writes and unlinks": r"ext4|vfs_|sys_write|sys_unlink|unlinkat|copy_user|filemap|generic_perform_write|jbd2",
}


def perf_share(program: str, args: list[str]) -> dict[str, Any]:
    """One run with tpuscope's dump under perf: the dump's share of the process's CPU samples."""
    import re

    with tempfile.TemporaryDirectory(prefix="hlo-perf-") as tmp:
        data = Path(tmp) / "perf.data"
        env = dict(
            os.environ,
            PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
            XLA_FLAGS=variant_flags("tpuscope", Path(tmp) / "dump"),
            PYTHONPATH=os.pathsep.join(
                [str(Path(program).resolve().parent), os.environ.get("PYTHONPATH", "")]
            ),
        )
        subprocess.run(
            [
                "perf",
                "record",
                "-F",
                "250",
                "-e",
                "cpu-clock",
                "-o",
                str(data),
                "--",
                sys.executable,
                program,
                *args,
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--sort", "sym", "--stdio", "--no-children"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    rows = [
        (float(m[1]), m[2]) for m in re.finditer(r"^\s+([\d.]+)%\s+\[.\]\s+(.*)$", report, re.M)
    ]
    shares = {
        name: round(sum(pct for pct, sym in rows if re.search(pattern, sym)), 2)
        for name, pattern in DUMP_CODE.items()
    }
    events = re.search(r"Event count \(approx\.\): (\d+)", report)  # cpu-clock: ns of CPU
    cpu_s = int(events[1]) / 1e9 if events else None
    dump_pct = round(sum(shares.values()), 2)
    return {
        "dump_share_pct": dump_pct,
        "by_part_pct": shares,
        "process_cpu_s": cpu_s,
        "dump_cpu_ms": round(cpu_s * dump_pct * 10, 1) if cpu_s else None,
        "samples_pct_listed": round(sum(pct for pct, _ in rows), 1),
    }


# -- the driver ------------------------------------------------------------------------------


def run_once(program: str, args: list[str], variant: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hlo-cost-") as tmp:
        folder, out = Path(tmp) / "dump", Path(tmp) / "figures.json"
        env = dict(os.environ, PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))
        flags = variant_flags(variant, folder)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
        read = ["--read", str(folder)] if variant in ("tpuscope", "nometa") else []
        cmd = [sys.executable, __file__, "--inner", out.as_posix(), *read, program, *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{variant}: {proc.stderr[-2000:]}")
        figures = json.loads(out.read_text())
        if not read and folder.is_dir():  # nothing emptied it: all it wrote is there
            names = os.listdir(folder)
            figures.update(
                files_written=len(names),
                peak_files=len(names),
                bytes_written=sum(_size(folder / n) for n in names),
            )
        figures["variant"] = variant
        return figures


def summarise(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    """Per variant: medians over rounds of the per-compile figures; and each against none."""
    table: dict[str, Any] = {}
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        steps = mine[0]["compile_steps"] or 1

        def med(key: str, per: int = steps, rows: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[key] for r in rows) / per

        table[variant] = {
            "compile_steps": mine[0]["compile_steps"],
            "compiles": mine[0]["compiles"],
            "cpu_ms_per_compile_step": round(1e3 * med("compile_cpu_s"), 1),
            "wall_ms_per_compile_step": round(1e3 * med("compile_wall_s"), 1),
            "xla_compile_ms_per_compile": round(
                1e3 * med("xla_compile_time_s", mine[0]["xla_compiles"] or 1), 1
            ),
            "read_ms_per_compile_step": round(1e3 * med("read_cpu_s"), 2),
            "read_wall_ms_per_compile_step": round(1e3 * med("read_wall_s"), 2)
            if "read_wall_s" in mine[0]
            else None,
            "sweep_cpu_ms_per_compile_step": round(1e3 * med("sweep_cpu_s"), 2)
            if "sweep_cpu_s" in mine[0]
            else None,
            "sweep_wall_ms_per_compile_step": round(1e3 * med("sweep_wall_s"), 2)
            if "sweep_wall_s" in mine[0]
            else None,
            "files_per_compile_step": round(med("files_written"), 1),
            "kb_per_compile_step": round(med("bytes_written") / 1024, 1),
            "peak_files_in_folder": max(r["peak_files"] for r in mine),
            "modules_shaped": f"{mine[0]['shaped']}/{mine[0]['modules_read']}"
            if mine[0]["modules_read"]
            else None,
            "process_cpu_s": round(med("process_cpu_s", 1), 2),
            "rounds": len(mine),
        }
    base = table.get("none")
    if base:
        for variant, row in table.items():
            if variant != "none":
                row["cpu_vs_none_pct"] = round(
                    100 * (row["cpu_ms_per_compile_step"] / base["cpu_ms_per_compile_step"] - 1), 1
                )
                row["cpu_ms_added_per_compile_step"] = round(
                    row["cpu_ms_per_compile_step"] - base["cpu_ms_per_compile_step"], 1
                )
    return table


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        rest = sys.argv[2:]
        out, read = rest[0], None
        rest = rest[1:]
        if rest[:1] == ["--read"]:
            read, rest = rest[1], rest[2:]
        _inner(rest[0], rest[1:], out, read)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("program")
    parser.add_argument("--args", default="", help="the program's own arguments, one string")
    parser.add_argument("--variants", default="none,text,tpuscope")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the runs and the table here")
    parser.add_argument(
        "--perf", action="store_true", help="also: the dump's share of one run's CPU samples"
    )
    opts = parser.parse_args()
    variants = opts.variants.split(",")
    runs = []
    for round_no in range(opts.rounds):
        order = variants if round_no % 2 == 0 else variants[::-1]  # alternate: load drifts
        for variant in order:
            runs.append(run_once(opts.program, shlex.split(opts.args), variant))
            print(
                f"round {round_no} {variant}: {runs[-1]['compile_steps']} compile steps, "
                f"{runs[-1]['compile_cpu_s']:.2f} s CPU in them",
                file=sys.stderr,
            )
    table = summarise(runs, variants) if runs else {}
    if opts.perf:
        table["perf"] = perf_share(opts.program, shlex.split(opts.args))
    print(json.dumps(table, indent=1))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"runs": runs, "table": table}, indent=1))


if __name__ == "__main__":
    main()
