"""Live alerts: one `tpuscope:` line on stderr per new problem, while the program runs.

    tpuscope: step 812: recompile of the graph from train.py:44 (3.1 s): arg 0: f32[8,128] -> f32[8,136]
    tpuscope: step 815: new CPU fallback aten::nonzero at model.py:88 (3 calls per step)

Where they are computed: in the process that reads the run, never in the program's.
`tpuscope run`'s launcher runs a watcher thread that reads the part files the program's
processes flush (every 2 s, collect/session.py) as they appear, each part once. The
program's step path pays nothing (no work, no lock, no GIL shared with the watcher:
another process), every process of the run (spawned workers, ranks) is seen by one
watcher, and the watcher judges exactly the rows the final analysis will read.
`tpuscope.profile(alerts=True)` runs the same watcher as a thread of the program itself
(it has no launcher): off the step path, but sharing the process.

The same rules as the final report (tpuscope/detect/run_analysis.py):
- a recompile is a further compile of a graph family (analyze/families.graph_families over
  every compile row read so far; a family's first compile is never one, wherever it
  happens); one alert per call site (detect/compile_changes.site_of, as the report has one card
  per site), saying what changed against the closest earlier compile of the family
  (detect/compile_changes.recompile_item) and its measured compile time;
- a CPU fallback is an op of any namespace torch_xla's fallback counted (`aten::*`, `torchvision::*`,
  a custom op's: parse/xla_counter_names.is_fallback_counter) that is not a value read (analyze/judge.is_value_read),
  in any step; one alert per op, at the user's line the site tracer found (it traces the
  steps after an op first appears; the alert waits for that), else at the line torch_xla's
  compile analyses name (detect/common.value_read_site), with its calls per step since
  it first ran.
Compile rows of a process are judged once its own meta names its backend (written in the
same flush), so a row is never judged with less than the report will know.

Rate limits (AlertPrinter): a problem is said once. Further recompiles at a site already
said are counted, and one line sums them up, at most once per REPEAT_S seconds, an
interval that doubles after each such line up to MAX_REPEAT_S: a storm prints one line,
then a count after 10 s, 20 s, 40 s ... At most MAX_NEW new-problem lines per REPEAT_S;
the ones past that are counted in the next summing-up line. When the program has ended,
one last read takes the rows of its last seconds and a last summing-up line prints what
is still counted; the report follows.
"""

from tpuscope.launch.alerts.judge import MAX_LINE, Again, AlertJudge, Problem
from tpuscope.launch.alerts.printer import MAX_NEW, MAX_REPEAT_S, REPEAT_S, AlertPrinter
from tpuscope.launch.alerts.tail import COLUMNS, PartTail
from tpuscope.launch.alerts.watcher import POLL_S, AlertWatcher

__all__ = [
    "COLUMNS",
    "MAX_LINE",
    "MAX_NEW",
    "MAX_REPEAT_S",
    "POLL_S",
    "REPEAT_S",
    "Again",
    "AlertJudge",
    "AlertPrinter",
    "AlertWatcher",
    "PartTail",
    "Problem",
]
