"""Ground truth of the corpus programs, measured without tpuscope, and their marker lines.

`measure(program)` runs `python tests/corpus/<program>` as a plain process (PJRT_DEVICE=CPU)
with CORPUS_TRUTH set, so the driver's hook (hook.py) writes what torch_xla's counters or JAX's
compile log said at every mark; `marker_line(program, name)` finds the line carrying the
comment `# corpus: <name>`, so tests never hard-code line numbers.

Usage: `python3 tests/corpus/truth.py corpus_xla_mnist.py [--hlo]` prints the measured truth.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpuscope.collect.xla.shapes import without_dump_flags

CORPUS = Path(__file__).resolve().parent
VALUE_READS = ("aten::_local_scalar_dense", "xla::_local_scalar_dense")
_DEF = re.compile(r"^\s*(?:ROOT )?%([\w.-]+) = (\w+\[[\d,]*\])", re.M)
_DOT = re.compile(r"%([\w.-]+) = \w+\[[\d,]*\]\S* dot\(%([\w.-]+), %([\w.-]+)\)")


def marker_line(program: str, name: str) -> int:
    """The 1-based line of `# corpus: <name>` in the program (exactly one such line)."""
    tag = f"# corpus: {name}"
    lines = [i for i, text in enumerate((CORPUS / program).read_text().splitlines(), 1)
             if text.rstrip().endswith(tag)]
    if len(lines) != 1:
        raise LookupError(f"{program}: {len(lines)} lines end with {tag!r}")
    return lines[0]


def where(program: str, name: str) -> str:
    """'<program>:<line of the marker>', the form findings are compared in."""
    return f"{program}:{marker_line(program, name)}"


@dataclass
class Truth:
    program: str
    returncode: int
    stdout: str
    stderr: str
    data: dict[str, Any]
    dots: list[tuple[str, str, str]] = field(default_factory=list)  # (lhs, rhs, result) of every HLO dot

    @property
    def labels(self) -> list[str]:
        return [m["label"] for m in self.data["marks"]]

    @property
    def extra(self) -> dict[str, Any]:
        return self.data["extra"]

    def work(self, label: str) -> dict[str, int]:
        """torch_xla counter increments from the mark `label` to the next mark: what that phase did."""
        marks = self.data["marks"]
        i = self.labels.index(label)
        before, after = marks[i]["counters"], marks[i + 1]["counters"]
        return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}

    def total(self, counter: str, prefix: str = "") -> int:
        """Sum of one counter's increments over the phases whose label starts with prefix."""
        return sum(self.work(label).get(counter, 0) for label in self.labels[:-1]
                   if label.startswith(prefix))

    def per_phase(self, counter: str, prefix: str = "") -> list[int]:
        return [self.work(label).get(counter, 0) for label in self.labels[:-1] if label.startswith(prefix)]

    @property
    def fallback_ops(self) -> list[str]:
        """executed_fallback_ops() without value reads (`_local_scalar_dense` is a host sync)."""
        return [op for op in self.data.get("fallback_ops") or [] if op not in VALUE_READS]

    def jax_compiles(self, fun: str) -> list[dict[str, str]]:
        """The `jax_log_compiles` records of one function: [{'fun', 'shapes', 'label'}, ...]."""
        return [c for c in self.data["jax_compiles"] if c["fun"] == fun]


def _dots(folder: Path) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for path in sorted(folder.glob("*before_optimizations.txt")):
        text = path.read_text()
        shapes = dict(_DEF.findall(text))
        found += [(shapes.get(lhs, "?"), shapes.get(rhs, "?"), shapes.get(out, "?"))
                  for out, lhs, rhs in _DOT.findall(text)]
    return found


def measure(program: str, *, hlo: bool = False, timeout: float = 300) -> Truth:
    """Run the program plainly with CORPUS_TRUTH (and an XLA HLO dump when hlo) and parse what it measured."""
    with tempfile.TemporaryDirectory(prefix="corpus-truth-") as tmp:
        out = Path(tmp) / "truth.json"
        env = {**os.environ, "CORPUS_TRUTH": str(out), "PJRT_DEVICE": "CPU"}
        for name in ("TPUSCOPE_STORE", "PT_XLA_DEBUG_LEVEL"):
            env.pop(name, None)
        env["XLA_FLAGS"] = without_dump_flags(env.get("XLA_FLAGS", ""))  # the suite's CPU flags
        if hlo:
            env["XLA_FLAGS"] += f" --xla_dump_to={tmp}/hlo"
        proc = subprocess.run([sys.executable, str(CORPUS / program)], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=timeout)
        data = json.loads(out.read_text()) if out.exists() else {"marks": [], "jax_compiles": [], "extra": {}}
        dots = _dots(Path(tmp) / "hlo") if hlo else []
    return Truth(program, proc.returncode, proc.stdout, proc.stderr, data, dots)


if __name__ == "__main__":
    t = measure(sys.argv[1], hlo="--hlo" in sys.argv)
    print(f"exit {t.returncode}; extra {t.extra}")
    keep = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep", "metric:EagerOpExecuteTime")
    for label in t.labels[:-1] if t.data.get("backend") == "xla" else []:  # JAX marks carry no counters
        print(label, {k: v for k, v in t.work(label).items() if k in keep or ("::" in k and not k.startswith("xla::"))})
    print("fallback_ops (no value reads):", t.fallback_ops)
    for c in t.data["jax_compiles"]:
        print("jax compile:", c["label"], c["fun"], c["shapes"][:100])
    for d in sorted(set(t.dots)):
        print("dot:", d, t.dots.count(d))
