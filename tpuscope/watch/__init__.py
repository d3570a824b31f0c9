"""Watch a block of code for recompiles and CPU fallbacks: the engine of the pytest plugin.

`engine` holds the Watch, `env` the settings a watched process needs before torch_xla starts,
`jax_rules` how a watch treats JAX, `text` the words of a failed watch. The names are loaded
on first use so that importing `tpuscope.watch.text` from a lower layer stays cheap.
"""

from typing import Any

__all__ = ["Limits", "Watch", "watch"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tpuscope.watch import engine

        return getattr(engine, name)
    raise AttributeError(name)
