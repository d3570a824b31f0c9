"""What a JAX value read costs on a traced chip (detect/read_idle), on the tables of a real v5e
run: flax's NNX VAE example reading its loss every step (tests/tpu/runs/flax_nnx_vae, whose
trace marks each read's wait with JAX's `np.asarray(jax.Array)` annotation, 0.50-0.61 ms)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tpuscope.analyze.contract import HostSyncEvidence
from tpuscope.detect.host_sync import _cost_text
from tpuscope.detect.read_idle import READ_EVENT, _read_wait_s
from tpuscope.detect.run_analysis import analyze
from tpuscope.store import Run

RUN = Path(__file__).parent / "tpu" / "runs" / "flax_nnx_vae"
TRACED = {3, 4, 5, 6, 7}


@pytest.fixture(scope="module")
def events() -> pd.DataFrame:
    return Run(RUN).table("trace_events")


def test_the_wait_is_the_reads_on_the_program_s_thread_a_step(events: pd.DataFrame) -> None:
    """Four traced steps' reads, 0.50-0.61 ms each: their mean. A read outside the traced steps
    (the host's windows put the last one in none) is not counted."""
    reads = events[events["name"] == READ_EVENT]
    expected = reads[reads["step"].isin(TRACED)].groupby("step")["dur_ns"].sum().mean() / 1e9
    assert _read_wait_s(events, TRACED) == pytest.approx(expected)
    assert 0.50e-3 <= _read_wait_s(events, TRACED) <= 0.61e-3
    assert _read_wait_s(events, {5}) == pytest.approx(
        reads.loc[reads["step"] == 5, "dur_ns"].sum() / 1e9
    )


def test_reads_of_a_host_callback_and_of_other_threads_are_not_the_program_s(
    events: pd.DataFrame,
) -> None:
    """A host callback's reads run on the runtime's threads (`TpuHostTransfer` in the chip's
    print-callback runs): not the program's wait."""
    reads = events[events["name"] == READ_EVENT]
    callback = reads.assign(line="TpuHostTransfer", dur_ns=reads["dur_ns"] * 10)
    both = pd.concat([events.astype({"line": str}), callback.astype({"line": str})])
    assert _read_wait_s(both, TRACED) == pytest.approx(_read_wait_s(events, TRACED))


def test_several_processes_wait_as_one_on_average(events: pd.DataFrame) -> None:
    """The same trace from a second process (its rows copied): the mean over processes, not
    their sum."""
    other = events.assign(pid=events["pid"].astype(int) + 1)
    both = pd.concat([events.astype({"pid": int}), other])
    assert _read_wait_s(both, TRACED) == pytest.approx(_read_wait_s(events, TRACED))


def test_a_trace_that_marks_no_read_has_no_wait(events: pd.DataFrame) -> None:
    assert _read_wait_s(events[events["name"] != READ_EVENT], TRACED) == 0.0
    assert _read_wait_s(events.drop(columns=["line"]), TRACED) == 0.0
    assert _read_wait_s(pd.DataFrame(), TRACED) == 0.0


def test_the_cost_sentence_with_and_without_a_measured_wait() -> None:
    with_wait = HostSyncEvidence(
        device_idle_s_per_step=7.6e-3, read_wait_s_per_step=0.56e-3, read_lost_s_per_step=0.56e-3
    )
    text = _cost_text(0.557, with_wait, "jax")
    assert "the host waited 560.0 us a traced step in them" in text
    assert text.endswith(": 560.0 us a step, 0.557 s over the steps that read.")
    without = HostSyncEvidence(
        device_idle_s_per_step=1.0e-3, read_wait_s_per_step=0.0, read_lost_s_per_step=0.8e-3
    )
    text = _cost_text(0.03, without, "jax")
    assert "(the trace marks no read's wait): 800.0 us a step" in text
    assert "; and" not in text and "that wait" not in text


def test_a_device_card_keeps_its_cost_where_host_and_device_take_turns(tmp_path: Path) -> None:
    """The VAE's step is host-bound but reads every step: the host waits for the device each
    step, so the device's time is on the step's path and its f32 card keeps its cost."""
    run_dir = tmp_path / "flax_nnx_vae"
    shutil.copytree(RUN, run_dir)
    findings = analyze(Run(run_dir)).findings
    (f32,) = [f for f in findings if f.rule == "tensorcore_underuse" and "f32" in f.title]
    assert f32.cost_s > 0 and f32.title.endswith("lost per step (measured)")
