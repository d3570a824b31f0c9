"""What collection costs the profiled process itself, which every report states."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class ProfilerCost:
    """What collection itself costs this process, kept in its meta so every report can say
    how much of the step time tpuscope added: time spent inside the step hooks (on the
    program's critical path; steps that compiled are counted apart, as parsing their
    compile reports is a one-off) and the flush thread's CPU time (beside it). The flush
    thread's work that follows compiles, not steps (deleting each compile's HLO dump: hundreds
    of files on the CPU backend), is `compile_flush_cpu_ns`, not in `flush_cpu_ns`: spread
    over the steps it made a 12-step run's cost look ten times what a step pays."""

    hook_ns: int = 0
    hook_calls: int = 0
    compile_hook_ns: int = 0
    compile_hook_calls: int = 0
    flush_cpu_ns: int = 0
    flushes: int = 0
    compile_flush_cpu_ns: int = 0  # the flush thread's per-compile work (Session.per_compile_flush)
    import_cpu_ns: int = (
        0  # one-off: pyarrow, imported by the first flush with rows (not in flush_cpu_ns)
    )
    trace_ns: int = 0  # one-off: a profiler window's start and stop, kept out of every step
    trace_stop_ns: int = 0  # of trace_ns, the stop's
    trace_wait_ns: int = 0  # of trace_stop_ns, the wait for the device's last traced steps

    def hooked(self, start_ns: int, compiled: bool = False) -> None:
        """Count one step hook that started at perf_counter_ns() == start_ns."""
        self.charge(time.perf_counter_ns() - start_ns, compiled)

    def charge(self, spent: int, compiled: bool = False) -> None:
        """Count one step hook's `spent` ns (a compiling step's hook is counted apart)."""
        if compiled:
            self.compile_hook_ns += spent
            self.compile_hook_calls += 1
        else:
            self.hook_ns += spent
            self.hook_calls += 1
