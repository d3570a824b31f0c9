"""Detectors: pure functions of a run's tables that return Findings, plus the default registry.

The default rules are registered here, after the registry exists, so importing any
one rule module (which imports the registry for RunTables) never sees a half-made
registry. Docs of every rule: docs/detectors.md.
"""

from tpuscope.detect.cpu_fallback import detect_cpu_fallback
from tpuscope.detect.host_sync import detect_host_sync
from tpuscope.detect.op_by_op import detect_op_by_op
from tpuscope.detect.rank_divergence import detect_rank_divergence
from tpuscope.detect.recompile import detect_recompile
from tpuscope.detect.registry import DETECTORS, POD_DETECTORS, RunTables, detect
from tpuscope.detect.straggler import detect_straggler
from tpuscope.detect.tensorcore import detect_tensorcore_underuse

for _rule in (detect_recompile, detect_cpu_fallback, detect_host_sync, detect_op_by_op,
              detect_tensorcore_underuse):
    if _rule not in DETECTORS:
        DETECTORS.append(_rule)
for _rule in (detect_straggler, detect_rank_divergence):  # hosts against each other (detect/pod.py)
    if _rule not in POD_DETECTORS:
        POD_DETECTORS.append(_rule)

__all__ = ["DETECTORS", "POD_DETECTORS", "RunTables", "detect"]
