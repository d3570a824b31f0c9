"""What every `tpuscope` command shares: the --store option and the one-line failure."""

from __future__ import annotations

import sys

import click

store_option = click.option(
    "--store",
    metavar="DIR|URL",
    envvar="TPUSCOPE_STORE",
    default="./tpuscope-runs",
    show_default=True,
    help="Run store: a folder or an fsspec URL such as gs://bucket/runs or s3://bucket/runs "
    "(env TPUSCOPE_STORE).",
)


def fail(message: str, code: int = 2) -> None:
    """One `tpuscope:` line on stderr, then exit (2: a bad command line, store or run)."""
    click.echo(f"tpuscope: {message}", err=True)
    sys.exit(code)
