"""The `tpuscope` command: a thin click shell over the library (entry point `tpuscope.cli:main`)."""

from tpuscope.cli.main import main

__all__ = ["main"]
