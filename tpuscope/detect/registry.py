"""The default detector registry: which rules judge a run, and in which order findings come."""

from __future__ import annotations

from collections.abc import Callable

from tpuscope.detect.ordering import order
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding
from tpuscope.schema_consts import HOST_RULES, POD_RULES, RULES

Detector = Callable[[RunTables], list[Finding]]
DETECTORS: list[Detector] = []  # rules of one host's tables (a pod: each host alone, detect/pod.py)
POD_DETECTORS: list[Detector] = []  # rules that judge the hosts against each other (2+ hosts)

__all__ = [
    "DETECTORS",
    "HOST_RULES",
    "POD_DETECTORS",
    "POD_RULES",
    "RULES",
    "Detector",
    "RunTables",
    "detect",
    "order",
]
_defaults_added = False


def register_defaults() -> None:
    """Put the default rules first in the registry, once. Done on first use, not at import:
    importing every rule costs pandas and the analysis stack, which readers of a stored analysis import
    neither (tpuscope/detect/__init__.py). Once only: a rule taken out of the list stays out."""
    global _defaults_added
    if _defaults_added:
        return
    from tpuscope.detect.compile_time import detect_compile_time
    from tpuscope.detect.cpu_fallback import detect_cpu_fallback
    from tpuscope.detect.host_callback import detect_host_callback
    from tpuscope.detect.host_sync import detect_host_sync
    from tpuscope.detect.op_by_op import detect_op_by_op
    from tpuscope.detect.rank_divergence import detect_rank_divergence
    from tpuscope.detect.recompile import detect_recompile
    from tpuscope.detect.straggler import detect_straggler
    from tpuscope.detect.tensorcore import detect_tensorcore_underuse

    rules = (
        detect_recompile,
        detect_cpu_fallback,
        detect_host_sync,
        detect_host_callback,
        detect_op_by_op,
        detect_tensorcore_underuse,
        detect_compile_time,
    )
    DETECTORS[:0] = [rule for rule in rules if rule not in DETECTORS]
    pod_rules = (
        detect_straggler,
        detect_rank_divergence,
    )  # hosts against each other (detect/pod.py)
    POD_DETECTORS[:0] = [rule for rule in pod_rules if rule not in POD_DETECTORS]
    _defaults_added = True


def detect(tables: RunTables, detectors: list[Detector] | None = None) -> list[Finding]:
    """Every finding of every detector, most severe first, then costliest. The default rules
    judge a run of many hosts host by host (findings merged per root cause, naming the hosts)
    and the pod rules judge the hosts against each other; given detectors run on the whole run."""
    if detectors is not None:
        return sorted([f for detector in detectors for f in detector(tables)], key=order)
    from tpuscope.detect.pod import detect_per_host, run_hosts

    register_defaults()
    hosts = run_hosts(tables)
    if len(hosts) < 2:
        findings = [f for detector in DETECTORS for f in detector(tables)]
    else:
        from tpuscope.detect.compile_time import detect_compile_time
        from tpuscope.detect.compile_time_pod import detect_compile_time_pod

        # compile_time is judged once on a pod, on its slowest host (compile_time_pod.py)
        per_host = [d for d in DETECTORS if d is not detect_compile_time]
        findings = detect_per_host(tables, per_host, hosts)
        if detect_compile_time in DETECTORS:
            findings += detect_compile_time_pod(tables, hosts)
        findings += [f for detector in POD_DETECTORS for f in detector(tables)]
    return sorted(findings, key=order)
