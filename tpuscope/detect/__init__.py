"""Detectors: pure functions of a run's tables that return Findings, plus the default registry.

The registry is loaded on first use (`tpuscope.detect.detect`, `DETECTORS`, ...): the rules
import pandas and the analysis stack (~0.4 s), which reading a stored analysis (`show` of an
ended run, `ls`, the dashboard's Runs page) never needs. The rules take their tables from
`detect.tables` and never import the registry; `registry.register_defaults` adds them on first
use. Docs of every rule: docs/detectors.md.
"""

from __future__ import annotations

from typing import Any

_FROM_REGISTRY = ("DETECTORS", "POD_DETECTORS", "RunTables", "detect")


def __getattr__(name: str) -> Any:
    """The registry's names, with the default rules registered (PEP 562: first use only)."""
    if name not in _FROM_REGISTRY:
        raise AttributeError(f"module 'tpuscope.detect' has no attribute {name!r}")
    from tpuscope.detect import registry

    registry.register_defaults()
    return getattr(registry, name)


__all__ = ["DETECTORS", "POD_DETECTORS", "RunTables", "detect"]
