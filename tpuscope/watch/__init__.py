"""Watch a block of code for recompiles and CPU fallbacks: the engine of the pytest plugin.

`engine` holds the Watch, `jax_rules` how a watch treats JAX, `text` the words of a failed
watch; the settings a watched process needs before torch_xla starts are launch/env.py's, and
its run ends as every run does (launch/lifecycle.finish_run). The names are loaded
on first use so that importing `tpuscope.watch.text` from a lower layer stays cheap.
"""

from typing import Any

__all__ = ["Limits", "Watch", "watch"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tpuscope.watch import engine

        return getattr(engine, name)
    raise AttributeError(name)
