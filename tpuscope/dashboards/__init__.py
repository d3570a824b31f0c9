"""tpuscope's web dashboard.

`create_app(store)` returns a Dash app over a run store. Importing this package
loads nothing (no Dash, no store): the app and its data are built on demand, so
`tpuscope --help` and the library stay fast and a collector never pulls in a web stack.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
