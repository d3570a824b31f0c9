"""The run store's constants that need no pyarrow, re-exported by tpuscope.schema: writing a
run's meta (the launcher, every profiled process at start-up) and checking `--fail-severity`
must not import the Arrow schemas. Bump SCHEMA_VERSION when a column changes meaning or
type (docs/store.md)."""

SCHEMA_VERSION = 2  # 2: compiles.backend/function/eager; findings.step_runs/step_count (was steps)
SEVERITIES = ("high", "medium", "low")
# the rules a finding can be of, named here without loading them (`--fail-on`, help texts):
# detect/registry.py's detectors of one host's tables, then its pod rules (tests/test_cli_lists.py
# keeps the two equal)
HOST_RULES = (
    "recompile",
    "cpu_fallback",
    "host_sync",
    "host_callback",
    "op_by_op",
    "tensorcore_underuse",
    "compile_time",
)
POD_RULES = ("straggler", "rank_divergence")
RULES = HOST_RULES + POD_RULES
# rules that `--fail-on all` leaves out (named alone, they gate as any rule): compile_time
# weighs how fast this machine compiled, not what the program does, and a CI gate on it would
# pass or fail with the runner's load
ADVICE_RULES = ("compile_time",)
# steps of each process left out before steps are judged (`--warmup`, meta["warmup"])
DEFAULT_WARMUP = 2
# steps.boundary of a torch_xla loop that passes no sync, whose optimizer steps mark its
# iterations (collect/xla/steps.py): each optimizer step, and the last iteration after the last one
OPTIMIZER_BOUNDARY = "optimizer.step"
LAST_ITERATION_BOUNDARY = "after the last optimizer.step"
NO_SYNC_BOUNDARIES = (OPTIMIZER_BOUNDARY, LAST_ITERATION_BOUNDARY)
# steps.boundary of a JAX loop whose steps the program's own jax.profiler.StepTraceAnnotation marks
ANNOTATION_BOUNDARY = "StepTraceAnnotation"
# steps.boundary of the work after the program's last step boundary (the after-the-loop phase)
AFTER_LOOP = "end"
# a JAX host callback's rows (collect/jax/callbacks.py, rule host_callback): its call_sites kind,
# and the prefix of its metrics rows `jax.host_callbacks/waited|unwaited/<api>(<fn>) @ <line>`
HOST_CALLBACK_KIND = "host_callback"
HOST_CALLBACK_METRICS = "jax.host_callbacks/"


def host_callback_metric(waited: bool, name: str, location: str | None, cpu: bool = False) -> str:
    """The metrics row name of one host callback's runs a step (count, host ns: their wall
    time, or with `cpu` the CPU time of the threads that ran them)."""
    kind = ("waited" if waited else "unwaited") + ("-cpu" if cpu else "")
    return f"{HOST_CALLBACK_METRICS}{kind}/{name} @ {location or '?'}"


def host_callback_ops_metric(name: str, location: str | None) -> str:
    """The metrics row name of the JAX ops one host callback's Python ran on its arguments
    outside jit, a step (count: ops dispatched, total: their host ns, compiles included)."""
    return f"{HOST_CALLBACK_METRICS}ops/{name} @ {location or '?'}"
