"""The environment variables `tpuscope run` passes to the program's processes.

Apart from the collectors so that the launcher can name them without importing what
collects (wrapt's import hooks, the session): the launcher's start-up is part of every
profiled command's cost.
"""

ENV_RUN_DIR = "TPUSCOPE_RUN_DIR"
ENV_WARMUP = "TPUSCOPE_WARMUP"
ENV_OWNS_DEBUG = (
    "TPUSCOPE_OWNS_PT_XLA_DEBUG"  # "1" when tpuscope, not the user, enabled PT_XLA_DEBUG
)
ENV_LAUNCHER_PID = "TPUSCOPE_LAUNCHER_PID"  # set by `tpuscope run` for the program it starts
