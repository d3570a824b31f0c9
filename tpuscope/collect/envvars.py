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

# The signal the program's first process gets when its launcher dies (PR_SET_PDEATHSIG): one no
# program uses, so tpuscope may handle it (record the run's end) while SIGTERM keeps its default
# action, which ends the process at once even inside a long C++ call (an XLA compile). Its own
# default action also ends a process, should no handler be installed. A number, not
# signal.SIGRTMIN + 3, so that reading this module imports nothing.
LAUNCHER_LOST_SIGNAL_OFFSET = 3  # signal.SIGRTMIN + this
