"""tpuscope: find recompiles, CPU fallbacks, shape churn and TensorCore underuse in XLA programs.

The package root stays import-light: a profiled program imports tpuscope at start-up
(through sitecustomize), so the public API is loaded on first use.
"""

from typing import Any

from tpuscope.version import __version__

__all__ = ["__version__", "load_run", "profile"]


def __getattr__(name: str) -> Any:
    if name == "profile":
        from tpuscope.launch.profile import profile

        return profile
    if name == "load_run":
        from tpuscope.store import load_run

        return load_run
    raise AttributeError(name)
