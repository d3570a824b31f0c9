"""CI limits on one run's analysis: `tpuscope run --fail-on / --max-recompiles / --max-fallbacks`.

Pure: the run's one analysis (summary + findings, tpuscope.detect.run_analysis) in, the reasons it
fails out. Nothing here re-derives a rule: recompiles are the summary's `recompiles`
(graph families), fallback calls are the summary's `fallback_ops` (value reads such as
`aten::_local_scalar_dense` are host syncs, never fallbacks), and findings are the ones
the detectors wrote. The counting and the allow globs are the pytest marker's
(`max_recompiles`, `max_fallbacks`, `allow_fallbacks`), so a limit means the same in
both places.

Exit status (docs/ci.md): the program's own non-zero status, or the signal that killed
it, always wins; otherwise EXIT_LIMIT when a limit is exceeded, EXIT_UNJUDGED when a
limit was asked for but the run could not be analysed (a CI gate must not pass
silently).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuscope.analyze.contract import RecompileEvidence, RunSummary, as_summary
from tpuscope.schema_consts import ADVICE_RULES, RULES, SEVERITIES

if TYPE_CHECKING:
    from tpuscope.schema import Finding

EXIT_LIMIT = 3
EXIT_UNJUDGED = 4


def fallback_name(op: str) -> str:
    """`nonzero` -> `aten::nonzero`; names with a namespace (or globs like `aten::*`) stay."""
    return op if "::" in op else f"aten::{op}"


def op_allowed(op: str, patterns: Iterable[str]) -> bool:
    """Allow entries are op names or globs, with or without the `aten::` prefix."""
    return any(fnmatch.fnmatchcase(op, fallback_name(p)) for p in patterns)


def parse_rules(text: str | None) -> tuple[str, ...]:
    """'recompile,cpu_fallback' -> the rule names; 'all' is every rule but the advice rules
    (schema_consts.ADVICE_RULES: compile_time), which gate only when named. ValueError names a
    bad one."""
    names = tuple(dict.fromkeys(n.strip() for n in (text or "").split(",") if n.strip()))
    if "all" in names:
        named = [n for n in names if n in ADVICE_RULES]  # 'all,compile_time' gates on it too
        return tuple(r for r in RULES if r not in ADVICE_RULES or r in named)
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise ValueError(f"unknown rule {', '.join(unknown)} (rules: {', '.join(RULES)}, or all)")
    return names


def parse_ops(text: str | None) -> tuple[str, ...]:
    """'nonzero,aten::unique*' -> the allow patterns."""
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


@dataclass(frozen=True)
class Policy:
    """What a run may do. None / empty means "not checked"."""

    fail_on: tuple[str, ...] = ()
    fail_severity: str = "low"
    max_recompiles: int | None = None
    max_fallbacks: int | None = None
    allow_fallbacks: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return (
            bool(self.fail_on) or self.max_recompiles is not None or self.max_fallbacks is not None
        )


def fallback_calls(summary: RunSummary, allow: Sequence[str] = ()) -> dict[str, int]:
    """{op: calls} of the CPU fallbacks the analysis counted, less the allowed ops."""
    return {
        str(op.op): int(op.count)
        for op in summary.fallback_ops or []
        if not op_allowed(str(op.op), allow)
    }


def _at_least(severity: str, floor: str) -> bool:
    return SEVERITIES.index(severity) <= SEVERITIES.index(floor)


def is_note(finding: Finding) -> bool:
    """A recompile note on a bounded set of graphs (buckets: each compiled once, the set stopped
    growing; analyze/families.py): reported, never a failure of `--fail-on recompile`, since its
    compiles are not recompiles (the summary's `recompiles`, which --max-recompiles bounds, leaves
    them out too)."""
    return finding.rule == "recompile" and RecompileEvidence.of(finding).verdict == "bounded"


def _where(finding: Finding) -> str:
    loc = finding.location
    return f" at {loc.rsplit('/', 1)[-1]}" if loc else ""


def reasons(
    summary: RunSummary | dict[str, Any], findings: Sequence[Finding], policy: Policy
) -> list[str]:
    """Why the run fails the policy, one short phrase per limit exceeded (empty: it passes);
    the summary as the analysis made it, or its JSON form."""
    summary = as_summary(summary)
    out = []
    recompiles = int(summary.recompiles or 0)
    if policy.max_recompiles is not None and recompiles > policy.max_recompiles:
        out.append(
            f"{recompiles} recompile{'s' * (recompiles != 1)} > --max-recompiles {policy.max_recompiles}"
        )
    calls = fallback_calls(summary, policy.allow_fallbacks)
    total = sum(calls.values())
    if policy.max_fallbacks is not None and total > policy.max_fallbacks:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(calls.items(), key=lambda kv: -kv[1])[:3])
        out.append(
            f"{total} CPU fallback call{'s' * (total != 1)} > --max-fallbacks {policy.max_fallbacks} ({ops})"
        )
    hits = [
        f
        for f in findings
        if f.rule in policy.fail_on
        and _at_least(f.severity, policy.fail_severity)
        and not is_note(f)
    ]
    out.extend(f"{f.rule} ({f.severity}){_where(f)}" for f in hits[:5])
    if len(hits) > 5:
        out.append(f"{len(hits) - 5} more findings")
    return out


def exit_status(program: int, failed: Sequence[str], judged: bool = True) -> int:
    """The status `tpuscope run` ends with: the program's own if non-zero (negative: killed by
    that signal), else EXIT_LIMIT for a failed limit, EXIT_UNJUDGED if it could not be judged."""
    if program != 0:
        return program
    if not judged:
        return EXIT_UNJUDGED
    return EXIT_LIMIT if failed else 0
