"""Does tpuscope agree with the counters? One cell's findings against the truth's expectations.

Judged facts: a `recompile` finding iff a judged step compiled (UncachedCompile > 0 after
warm-up), where a bounded set's low note (`verdict` "bounded": a few graphs of one family,
each compiled once, that stopped growing) says "not a recompile" and counts as none; the `cpu_fallback` findings' ops equal executed_fallback_ops() less value reads; a
`host_sync` finding iff the judged steps read values (>= 1 per step on average, in at least half
of them); tpuscope's step count equals the program's iterations. Every mismatch is one disagreement, said in words.
"""

from __future__ import annotations

from typing import Any


def said(findings: list[dict[str, Any]], steps: int | None) -> dict[str, object]:
    """What tpuscope said, in the expectations' terms."""
    rules = {f.get("rule") for f in findings}
    ops = sorted(
        {
            str((f.get("evidence") or {}).get("op"))
            for f in findings
            if f.get("rule") == "cpu_fallback"
        }
    )
    kinds = sorted(
        {
            str(k)
            for f in findings
            if f.get("rule") == "tensorcore_underuse"
            for k in (f.get("evidence") or {}).get("kinds") or []
            if k
        }
    )
    recompiles = [
        f
        for f in findings
        if f.get("rule") == "recompile" and (f.get("evidence") or {}).get("verdict") != "bounded"
    ]
    return {
        "recompile": bool(recompiles),
        "cpu_fallback": ops,
        "host_sync": "host_sync" in rules,
        "steps": steps,
        "op_by_op": "op_by_op" in rules,
        "tensorcore": kinds,
    }


def disagreements(expected: dict[str, object], told: dict[str, object]) -> list[str]:
    """'<fact>: tpuscope <x>, counters <y>' for every fact where the two differ."""
    return [
        f"{key}: tpuscope {told.get(key)!r}, counters {want!r}"
        for key, want in expected.items()
        if told.get(key) != want
    ]
