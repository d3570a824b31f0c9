"""The order every surface lists findings in, apart from the registry so that reading a
stored analysis (`show`, `ls`, the dashboard) sorts findings without importing pandas."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpuscope.schema import Finding


def order(finding: Finding) -> tuple[int, float, str]:
    """Severity, then cost (costliest first), then rule."""
    from tpuscope.schema_consts import SEVERITIES

    return (SEVERITIES.index(finding.severity), -finding.cost_s, finding.rule)
