"""Run a program as `python3 PROGRAM ARGS` runs it, bare, with a JAX profiler trace of one span
of it chosen by what it prints: the truth about an upstream program's device time, taken
without tpuscope and without editing the program.

    python3 bare_trace.py --mark "Epoch" --after 1 [--out DIR] [--per N] PROGRAM [ARGS...]

starts the trace when the program has printed `--after` lines holding `--mark` and stops it at
the next such line: with an epoch loop that prints each epoch's time, the trace holds exactly
one whole epoch after the first (whose time holds the compiles). Why a print and not a timer:
compile times on the chip vary by seconds, and the print comes between epochs on the program's
own thread, so the profiler starts and stops outside the steps it measures. `--gaps` prints
every gap between consecutive marks (a program whose phases step at different speeds).

Without `--out` nothing is traced. Either way, at exit it prints the marked lines' clock: the
median time between consecutive marks after the `--after` first, divided by `--per` (the
steps between two marks): the step time of a program that prints but does not time itself.
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import sys
import time
from typing import Any, TextIO


class _Marks:
    """The program's stdout, counting the lines that hold the mark; starts and stops the
    trace at the chosen counts."""

    def __init__(self, stream: TextIO, mark: str, after: int, out: str | None) -> None:
        self.stream, self.mark, self.after, self.out = stream, mark, after, out
        self.seen = 0
        self.tracing = False
        self.clock: list[float] = []  # when each marked line was written

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        for line in text.splitlines():
            if self.mark in line:
                self.clock.append(time.perf_counter())
                self.seen += 1
                if self.out:
                    self._window()
        return written

    def _window(self) -> None:
        import jax

        if self.seen == self.after and not self.tracing:
            self.stream.flush()
            jax.profiler.start_trace(self.out)
            self.tracing = True
        elif self.seen == self.after + 1 and self.tracing:
            jax.profiler.stop_trace()
            self.tracing = False
            print(f"bare_trace: one span traced into {self.out}", file=sys.stderr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mark", required=True, help="text of the line that ends a span")
    parser.add_argument("--after", type=int, default=1, help="spans to let pass first")
    parser.add_argument("--out", help="the trace's log directory (none: no trace)")
    parser.add_argument("--per", type=int, default=1, help="steps between two marks")
    parser.add_argument("--gaps", action="store_true", help="also print every gap between marks")
    parser.add_argument("program")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    marks = _Marks(sys.stdout, options.mark, options.after, options.out)
    sys.stdout = marks  # type: ignore[assignment]
    sys.argv = [options.program, *options.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(options.program)))
    try:
        runpy.run_path(options.program, run_name="__main__")
    finally:
        if marks.tracing:  # the program ended inside the span: keep what was traced
            import jax

            jax.profiler.stop_trace()
        report_clock(marks.clock[options.after :], options.per)
        if options.gaps:
            gaps = [b - a for a, b in zip(marks.clock, marks.clock[1:], strict=False)]
            print("bare_trace gaps (s):", " ".join(f"{g:.4f}" for g in gaps), file=sys.stderr)


def report_clock(marked: list[float], per: int) -> None:
    """The median step between the marks kept, on stderr (the program's stdout stays its own)."""
    gaps = [later - earlier for earlier, later in zip(marked, marked[1:], strict=False)]
    if gaps:
        step_ms = statistics.median(gaps) / per * 1e3
        mean_ms = (marked[-1] - marked[0]) / len(gaps) / per * 1e3
        print(
            f"bare_trace clock: {len(gaps)} spans, median {step_ms:.4f} ms a step, mean {mean_ms:.4f}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
