"""Detectors: pure functions of a run's tables that return Findings, plus the default registry."""

from tpuscope.detect.registry import DETECTORS, RunTables, detect

__all__ = ["DETECTORS", "RunTables", "detect"]
