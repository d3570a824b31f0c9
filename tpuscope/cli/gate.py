"""The CI half of the CLI: `tpuscope run`'s limits (--fail-on, --max-*) and `tpuscope diff`.

Thin: the judgement is tpuscope.analyze.gate and the comparison tpuscope.analyze.compare
(both pure, over each run's one analysis); this module parses options, picks the exit
status and says why in one `tpuscope:` line on stderr (docs/ci.md).
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from tpuscope.schema_consts import ADVICE_RULES, RULES, SEVERITIES

if TYPE_CHECKING:
    from tpuscope.analyze.gate import Policy
    from tpuscope.detect.run_analysis import RunReport

_RULES_HELP = f"{', '.join(RULES)}, or all (every rule but {', '.join(ADVICE_RULES)})"


def _say(message: str) -> None:
    click.echo(f"tpuscope: {message}", err=True)


def gate_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --fail-on, --fail-severity, --max-recompiles, --max-fallbacks, --allow-fallbacks;
    the command gets them as one `policy` argument."""

    @functools.wraps(command)
    def wrapper(
        *args: Any,
        fail_on: str | None,
        fail_severity: str,
        max_recompiles: int | None,
        max_fallbacks: int | None,
        allow_fallbacks: str | None,
        **kwargs: Any,
    ) -> Any:
        from tpuscope.analyze.gate import Policy, parse_ops, parse_rules

        try:
            rules = parse_rules(fail_on)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--fail-on") from None
        policy = Policy(
            rules, fail_severity, max_recompiles, max_fallbacks, parse_ops(allow_fallbacks)
        )
        return command(*args, policy=policy, **kwargs)

    options = [
        click.option(
            "--fail-on",
            metavar="RULES",
            help=f"Exit 3 if the run has a finding of these rules ({_RULES_HELP}).",
        ),
        click.option(
            "--fail-severity",
            type=click.Choice(SEVERITIES[::-1]),
            default="low",
            show_default=True,
            help="Only findings at least this severe count for --fail-on.",
        ),
        click.option(
            "--max-recompiles",
            type=click.IntRange(min=0),
            metavar="N",
            help="Exit 3 if the run recompiled more than N times (the analysis' recompiles).",
        ),
        click.option(
            "--max-fallbacks",
            type=click.IntRange(min=0),
            metavar="N",
            help="Exit 3 if more than N CPU fallback calls ran (value reads are not fallbacks).",
        ),
        click.option(
            "--allow-fallbacks",
            metavar="OPS",
            help="Comma list of ops (names or globs, aten:: optional) --max-fallbacks ignores.",
        ),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def _program_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def judge_run(code: int, report: RunReport | None, policy: Policy) -> int:
    """The exit status of `tpuscope run`: the program's own unless it is 0 and a limit fails."""
    if not policy.active:
        return code
    from tpuscope.analyze.gate import exit_status, reasons

    failed = reasons(report.summary, report.findings, policy) if report is not None else []
    status = exit_status(code, failed, judged=report is not None)
    if code != 0 and failed:
        _say(
            f"limits exceeded too ({'; '.join(failed)}); the status stays the program's ({_program_text(code)})"
        )
    elif report is None and code == 0:
        _say(f"exit {status}: the run could not be analysed, so its limits were not checked")
    elif failed:
        _say(f"exit {status}: {'; '.join(failed)}")
    return status


def diff_main(
    store: str,
    run_a: str,
    run_b: str,
    as_json: bool,
    as_markdown: bool,
    regression_pct: float | None,
) -> None:
    """Compare two runs, print the result, exit 3 on a regression when asked to."""
    from tpuscope.analyze.compare import compare, regressions
    from tpuscope.analyze.gate import EXIT_LIMIT
    from tpuscope.report.diff import side_of
    from tpuscope.report.renderers import renderer_for
    from tpuscope.store import Run, RunStore, StoreError

    try:
        store_obj = RunStore(store)
        side_a, side_b = (side_of(Run(store_obj.resolve(r))) for r in (run_a, run_b))
    except StoreError as exc:
        _say(str(exc))
        sys.exit(2)
    diff = compare(side_a, side_b)
    failed = regressions(diff, regression_pct) if regression_pct is not None else None
    name = "json" if as_json else "markdown" if as_markdown else "console"
    renderer_for("diff", name).emit({**diff, "regression": failed})
    if failed:
        _say(f"exit {EXIT_LIMIT}: regression: {'; '.join(failed)}")
        sys.exit(EXIT_LIMIT)


def percent(text: str) -> float:
    """'5%' or '5' -> 5.0 (click type for --fail-on-regression)."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a percentage such as 5%") from None
    if value < 0:
        raise click.BadParameter("must be >= 0")
    return value
