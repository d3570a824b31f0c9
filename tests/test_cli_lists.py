"""The rule and severity lists every surface shows are the registry's (issue 28): `--fail-on`
takes every rule a finding can be of (the pod rules included), the help says them, and the
names in schema_consts (read without loading a rule) are the registered detectors' own."""

from __future__ import annotations

import sys

from click.testing import CliRunner

from tpuscope.analyze.gate import parse_rules
from tpuscope.cli.main import main
from tpuscope.detect import registry
from tpuscope.schema_consts import ADVICE_RULES, HOST_RULES, POD_RULES, RULES, SEVERITIES


def _rule_of(detector: registry.Detector) -> str:
    return sys.modules[detector.__module__].RULE


def test_the_rule_names_are_the_registered_detectors() -> None:
    registry.register_defaults()
    assert tuple(dict.fromkeys(_rule_of(d) for d in registry.DETECTORS)) == HOST_RULES
    assert tuple(_rule_of(d) for d in registry.POD_DETECTORS) == POD_RULES


def test_fail_on_takes_the_pod_rules_and_all_is_every_rule() -> None:
    assert parse_rules("straggler,rank_divergence") == ("straggler", "rank_divergence")
    # every rule but the advice rules (compile_time: how fast this machine compiled), which gate
    # only when named
    assert parse_rules("all") == tuple(r for r in RULES if r not in ADVICE_RULES)
    assert parse_rules("all,compile_time") == RULES
    assert parse_rules("compile_time") == ("compile_time",)


def test_run_help_lists_every_rule_and_severity() -> None:
    text = " ".join(CliRunner().invoke(main, ["run", "--help"], terminal_width=400).output.split())
    assert f"({', '.join(RULES)}, or all (every rule but compile_time))" in text
    assert f"[{'|'.join(SEVERITIES[::-1])}]" in text
