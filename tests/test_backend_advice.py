"""Advice for the backend that ran (issue 39): a JAX run's fixes never name torch_xla's APIs
(MpDeviceLoader, torch_xla.compile, mark_step, PT_XLA_DEBUG, torch.autocast), a torch_xla
run's never JAX's.

Every rule runs over the real runs in sample_traces/ (torch_xla runs and a JAX run), each
judged once as the backend it is and once as the other (the run's meta names the backend, as
every rule reads it): whatever fires must speak the backend the meta names. A measured xprof
overview with the device idle is added so the host-bound card (tensorcore_measured) fires too.
Judged as JAX, a torch_xla run loses its fallbacks rows (ATen ops on the host are torch's).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT
from tpuscope.detect import RunTables, detect
from tpuscope.detect.advice import TOPICS, for_backend
from tpuscope.detect.jax_advice import ADVICE as JAX_ADVICE
from tpuscope.store import Run

SAMPLES = sorted(p.parent for p in (ROOT / "sample_traces").glob("*/meta.json"))

# the other backend's APIs, by the backend that ran
FOREIGN = {
    "jax": re.compile(
        r"torch|MpDeviceLoader|mark_step|\bxm\.|PT_XLA|XLA_IR_DEBUG|DataLoader|add_step_closure"
    ),
    "torch_xla": re.compile(r"jax|jnp|flax|grain|tf\.data", re.IGNORECASE),
}


class _WithIdleDevice(Mapping[str, pd.DataFrame]):
    """A run's other tables, plus xprof's overview saying the device was busy 5% of the time."""

    def __init__(self, extra: Mapping[str, pd.DataFrame]) -> None:
        self._extra = extra
        row = {"host": "vm", "pid": 0, "rank": 0, "source": "overview_page", "text": None}
        self._overview = pd.DataFrame([{**row, "name": "device_duty_cycle_percent", "value": 5.0}])

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._overview if name == "xprof_overview" else self._extra[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._extra)

    def __len__(self) -> int:
        return len(self._extra)


def _as_backend(sample: Path, backend: str, idle: bool) -> RunTables:
    tables = RunTables.from_run(Run(sample))
    meta = copy.deepcopy(tables.meta)
    for process in meta.get("processes") or []:
        process["backend"] = backend
    extra = _WithIdleDevice(tables.extra) if idle else tables.extra
    # ATen ops run on the host are torch's: a JAX run has no fallbacks table rows
    fallbacks = tables.fallbacks.iloc[0:0] if backend == "jax" else tables.fallbacks
    return RunTables(meta, tables.steps, tables.compiles, fallbacks, tables.metrics, extra)


@pytest.mark.parametrize("backend", ["jax", "torch_xla"])
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_every_fix_speaks_the_backend_that_ran(sample: Path, backend: str) -> None:
    for idle in (False, True):
        tables = _as_backend(sample, backend, idle)
        assert tables.backend == backend
        findings = detect(tables)
        if idle:
            assert any("device idle" in f.title for f in findings), [f.title for f in findings]
        for finding in findings:
            foreign = FOREIGN[backend].findall(finding.fix)
            assert not foreign, (
                f"{sample.name} as {backend}: {finding.rule} fix names {foreign}: {finding.fix}"
            )


def test_the_samples_hold_both_backends_and_the_rules_that_advise() -> None:
    """What the test above covers: real runs of each backend, and the rules whose fixes differ."""
    own = {s.name: RunTables.from_run(Run(s)).backend for s in SAMPLES}
    assert {"jax", "torch_xla"} <= set(own.values()), own
    fired = {
        f.rule
        for s in SAMPLES
        for b in ("jax", "torch_xla")
        for f in detect(_as_backend(s, b, idle=True))
    }
    assert {"recompile", "host_sync", "cpu_fallback", "tensorcore_underuse"} <= fired, fired


@pytest.mark.parametrize("topic", TOPICS)
def test_each_topic_has_both_backends_words(topic: str) -> None:
    assert set(JAX_ADVICE) == set(TOPICS)
    for backend, other in (("jax", "torch_xla"), ("torch_xla", "jax"), ("torch_tpu", "jax")):
        words = for_backend(backend, topic)
        assert words and not FOREIGN[backend if backend != "torch_tpu" else "torch_xla"].search(
            words
        ), (backend, topic, words)
        assert words != for_backend(other, topic)
