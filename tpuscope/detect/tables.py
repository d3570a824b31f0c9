"""The tables every detector receives (`RunTables`): a run's meta and DataFrames, with the
views many rules share (graph families, judged steps, per-name metrics) computed once.

Apart from the registry, which imports every rule: a rule imports this module, never the
registry, so the rules and the registry do not import each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from tpuscope.analyze.contract import RunSummary
from tpuscope.analyze.families import backend_of_modules, graph_families, process_backends
from tpuscope.analyze.judge import in_loop
from tpuscope.analyze.pod_sql import PodSteps
from tpuscope.schema_consts import DEFAULT_WARMUP

# A list of graph hashes per step that no rule reads (compiles has them): on a million steps,
# a million Python lists to build and to carry through every selection.
UNREAD_STEP_COLUMNS = ("graph_hashes",)
FRAMEWORKS = ("torch_xla", "jax", "torch_tpu")  # what a process may report; importers write
# what they read ("trace", "xprof", "hlo"), which says nothing of the framework


class LazyTables(Mapping[str, pd.DataFrame]):
    """A run's other tables, each read on first access: a trace can hold millions of
    events that most detectors never look at."""

    def __init__(self, run: Any, names: list[str]) -> None:
        self._run, self._names = run, names
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._run.table(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class RunTables:
    """What a detector may read: meta plus DataFrames (empty when a table is absent)."""

    meta: dict[str, Any]
    steps: pd.DataFrame
    compiles: pd.DataFrame
    fallbacks: pd.DataFrame
    metrics: pd.DataFrame
    extra: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    source: Any = field(default=None, repr=False)  # the Run read (from_run), for `history`

    @cached_property
    def history(self) -> pd.DataFrame:
        """Earlier runs of the same program in the run's store and the graphs they compiled
        (detect/compile_history.py; rule compile_time), read on first use: empty for tables not
        read from a run (hand-built, a pod's hosts) or a run that compiled nothing."""
        from tpuscope.detect.compile_history import empty, run_history

        if self.source is None or self.compiles.empty:
            return empty()
        return run_history(self.source)

    @property
    def warmup(self) -> int:
        return int(self.meta.get("warmup", DEFAULT_WARMUP))

    @cached_property
    def step_sql(self) -> PodSteps:
        """The steps table's figures (analyze/pod_sql.PodSteps, DuckDB over this frame): its
        phases, the summary's step figures, loop ends, and for two or more hosts the pod view.
        A pod's (detect/pod_tables.PodTables) are the same SQL over its Parquet parts."""
        return PodSteps.over_frame(self.steps, self.warmup)

    @cached_property
    def families(self) -> pd.DataFrame:
        """The compiles with their graph family and recompile flag (analyze/families.py)."""
        return graph_families(
            self.compiles,
            process_backends(self.meta),
            self.step_sql.loop_ends(),
            self.unsynced,
        )

    @cached_property
    def unsynced(self) -> set[tuple[str, int]]:
        """('host/pid', step) of the steps of a loop with no sync (analyze/step_stream)."""
        return self.step_sql.unsynced_steps()

    @cached_property
    def phase(self) -> pd.Series:
        """Per step row: warmup, judged or after (analyze/judge.phases), computed once: every
        detector asks, and on a million steps each ask cost 0.4 s."""
        if self.steps.empty:
            return pd.Series(dtype=object, index=self.steps.index)
        return pd.Series(self.step_sql.labels(), index=self.steps.index, dtype=object)

    @cached_property
    def judged(self) -> pd.DataFrame:
        """The judged steps (analyze/judge), selected once for every detector."""
        return self.steps if self.steps.empty else self.steps[self.phase.to_numpy() == "judged"]

    @cached_property
    def loop(self) -> pd.DataFrame:
        """Every step of the loop (warm-up included; setup and the after-the-loop step not)."""
        return self.steps if self.steps.empty else self.steps[in_loop(self.phase).to_numpy()]

    @cached_property
    def pod_view(self) -> dict[str, Any]:
        """The hosts judged against each other (analyze/pod_view.py; empty below two hosts):
        the straggler rule and the summary's hosts both read it."""
        return self.step_sql.pod_view()

    @cached_property
    def _metric_index(self) -> dict[Any, Any]:
        metrics = self.metrics
        return {} if metrics.empty else metrics.groupby("name", sort=False, dropna=True).indices

    def metric_rows(self, names: Iterable[str]) -> pd.DataFrame:
        """The metrics rows of some names, in table order. The table is grouped by name once:
        selecting a name by comparing strings cost ~0.2 s per ask on 6M rows."""
        import numpy as np

        index = self._metric_index
        found = [index[n] for n in dict.fromkeys(names) if n in index]
        if not found:
            return self.metrics.iloc[0:0]
        return self.metrics.iloc[np.sort(np.concatenate(found))]

    @property
    def backend(self) -> str:
        """The run's backend: "torch_xla", "jax" or "torch_tpu": as its processes reported it, its
        compiles, or (an imported trace) its HLO modules' names; torch_xla when unknown."""
        found = [b for b in process_backends(self.meta).values() if b in FRAMEWORKS]
        if found:
            return found[0]
        families = self.families
        if not families.empty:
            return str(families["backend"].iloc[0])
        hlo_ops = self.extra.get("hlo_ops", pd.DataFrame())  # an imported trace: its modules
        modules = hlo_ops["module"].unique() if "module" in hlo_ops else []
        return backend_of_modules(modules) or "torch_xla"

    def summarize(self) -> RunSummary:
        """analyze/summary.summarize of these tables: the summary's headline figures."""
        from tpuscope.analyze.summary import summarize

        return summarize(self.meta, self.step_sql, self.families, self.fallbacks, self.metrics)

    @classmethod
    def from_run(cls, run: Any) -> RunTables:
        """Every table of the run: the four main ones as fields, the others in `extra`."""
        from tpuscope.schema import TABLES

        main = ("steps", "compiles", "fallbacks", "metrics", "findings")
        extra = LazyTables(run, [name for name in TABLES if name not in main])
        steps = [c for c in TABLES["steps"].names if c not in UNREAD_STEP_COLUMNS]
        return cls(
            meta=run.meta,
            steps=run.table("steps", columns=steps),
            compiles=run.compiles,
            fallbacks=run.fallbacks,
            metrics=run.metrics,
            extra=extra,
            source=run,
        )
