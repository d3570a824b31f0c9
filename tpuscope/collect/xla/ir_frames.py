"""`--deep`'s Python frames on IR nodes: captured while graphs are new, not on every step.

XLA_IR_DEBUG / XLA_HLO_DEBUG make torch_xla record the Python stack of every IR node it
creates (torch lazy's `FLAGS_torch_lazy_ir_debug`), so that the HLO of a compile names the
user's line of each op. The stack walk runs for every op of every step, compiled or not:
measured on the README transformer (benchmarks/overhead.py --deep), it made every step
~15-25% slower, where only the steps whose graph compiles need it. torch_xla exposes the flag
(`torch_xla._XLAC._set_ir_debug`, read at each node's creation; the graph hash ignores it, so
switching it never causes a compile), so under `tpuscope run --deep` frames are on for the
warm-up steps and for `AFTER_COMPILE` steps after every compile (a program that compiles once
tends to compile again soon: new shapes, an eval graph), and off once that many steps in a
row compiled nothing. A graph first compiled after such a quiet stretch has its compile
cause and user line from PT_XLA_DEBUG as always, but no source lines in its HLO; from then
on frames are on again. A user who sets XLA_IR_DEBUG or XLA_HLO_DEBUG keeps frames on
every step (tpuscope leaves what the user set alone).
"""

from __future__ import annotations

import os
from typing import Any

ENV_IR_FRAMES = "TPUSCOPE_IR_FRAMES"  # "compiles": tpuscope set the IR debug variables (--deep)
AFTER_COMPILE = 8  # steps after a compile that still capture frames


class IrFrames:
    """Switches torch_xla's IR frame capture by the compiles the step hook sees."""

    def __init__(self, xlac: Any, warmup: int) -> None:
        self._set = xlac._set_ir_debug
        self._quiet_from = max(warmup, 0) + AFTER_COMPILE  # the first step frames may be off
        self.on = bool(xlac._get_ir_debug())
        self.off_steps = 0  # steps traced without frames (kept in meta at close)

    @classmethod
    def for_process(cls, xlac: Any, warmup: int) -> IrFrames | None:
        """The policy when `tpuscope run --deep` turned frames on, else None (frames as set)."""
        if os.environ.get(ENV_IR_FRAMES) != "compiles" or not hasattr(xlac, "_set_ir_debug"):
            return None
        return cls(xlac, warmup)

    def after_step(self, step: int, compiled: bool) -> None:
        """`step` just ended (traced with frames if `self.on`): frames for the next step's trace."""
        if not self.on:
            self.off_steps += 1
        if compiled:
            self._quiet_from = step + 1 + AFTER_COMPILE
        want = step + 1 < self._quiet_from
        if want != self.on:
            self._set(want)
            self.on = want
