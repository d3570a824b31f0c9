"""The zoo: every Hugging Face architecture through tpuscope on torch_xla (`tpuscope sweep`).

catalog (which model types), configs (tiny models from their own configs), inputs, scenarios
(what a cell runs), truth (the cell's counters), cell (one run in a fresh process), driver (the
sweep; not named `sweep`, which stays this function), agree (findings against counters), table (the results, and whether tpuscope agreed with the counters).
"""

from __future__ import annotations

from typing import Any


def sweep(*args: Any, **kwargs: Any) -> Any:
    """`tpuscope.zoo.driver.run_sweep` (imported on use: the package stays light)."""
    from tpuscope.zoo.driver import run_sweep

    return run_sweep(*args, **kwargs)
