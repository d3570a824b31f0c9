"""Flax's Gemma example served as its sampler samples, on a real TPU v5e (JAX 0.10.2):
tests/tpu/programs/gemma_serve.py over google/flax `examples/gemma` (gemma3_270m's 18 layers,
random weights, `Sampler(cache_size=1024)` called as train.py calls it), six requests of two
prompts each, run under `tpuscope run` in the default mode (`tests/tpu/chip_serve.sh 2`, session
43): tests/tpu/runs/gemma_serve, read by this round's code. The fixture keeps the trace's
Python events of 1 ms or more (the run's 5.5 million are 33 MB; read with all of them, the
report is the same).

The sampler sizes its token and logits buffers by the batch's longest prompt plus
`total_generation_steps` and jits its decoding `while_loop` over them: each new prompt length
compiles the whole decoder again. Truth, bare on the same chip (`chip_serve.sh 1`): six requests
take 72.87 s; the twin whose requests ask for `96 - longest prompt` new tokens (one buffer
length, one compile) 19.87 s, though it decodes more tokens. Requests 1-5 take 58.05 s against
the twin's 5.85 s: **52.20 s** lost. JAX's log: XLA compiled `_sample_fn` in 11.08, 10.40, 9.48,
10.42, 7.99 and 6.42 s.

Its twin, twice through the prompts under tpuscope (`chip_serve.sh 3`:
tests/tpu/runs/gemma_serve_fixed, the same Python events kept): one compile; a request in the
second round 0.65 s, the device busy 43 ms of it.

Main's code took the 1.85 s of tracing and lowering inside each traced recompile (the trace's
own compile events time XLA's backend compile alone: 10.00 s of the traced windows' 12.27 s of
compiling) for time the device waited on the host, and charged it to the 111 ops each request
dispatches outside jit: [high] op_by_op, 3.01 s a step, 12.0 s.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.chip_runs import analysed
from tpuscope.analyze.compiling import COMPILE_EVENT, compiling_ns

# requests 1-5, bare: 13,005.2 + 12,344.4 + 13,078.2 + 10,486.1 + 9,131.4 ms; the twin's 5,842.7 ms
LOST_S = (58_045.3 - 5_842.7) / 1e3
COMPILING_S = 12.27  # the run's compiles inside the traced windows: tracing, lowering, XLA
BACKEND_S = 10.00  # the trace's own PJRT_Client_Compile events in the same windows


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    return analysed(tmp_path_factory, "gemma_serve")["gemma_serve"]


def _card(report, rule: str):
    (card,) = [f for f in report.findings if f.rule == rule]
    return card


def test_each_new_prompt_length_is_a_recompile_costing_what_one_buffer_length_saves(
    served,
) -> None:
    """One card at the sampler's jitted call, its cost the recompiles' measured time: 56.14 s
    against 52.20 s (1.08; the compiles of the traced requests ran under the profiler)."""
    report, _ = served
    card = _card(report, "recompile")
    assert card.severity == "high" and card.location.endswith("gemma/sampler.py:499")
    assert [list(r) for r in card.step_runs] == [[1, 5]]
    assert card.cost_s == pytest.approx(LOST_S, rel=0.10)
    assert "dim 1 of initial_sampling_state.token_buffer (i32) took 6 sizes" in card.detail
    assert "same shape on every call of _sample_fn" in card.fix


def test_tracing_and_lowering_inside_the_trace_are_compile_time(served) -> None:
    """The traced windows' compile time is the run's compiles (tracing's start to XLA's end),
    more than the trace's backend compile events hold."""
    _, run = served
    windows = run.table("device_steps")
    events = run.table("trace_events")
    compiles, steps = run.table("compiles"), run.table("steps")
    assert compiling_ns(windows, compiles, events, steps) / 1e9 == pytest.approx(
        COMPILING_S, abs=0.01
    )
    assert compiling_ns(windows, pd.DataFrame(), events, steps) / 1e9 == pytest.approx(
        BACKEND_S, abs=0.01
    )
    assert (events["name"] == COMPILE_EVENT).any()


def test_the_ops_beside_the_sampler_are_not_charged_with_its_compiles(served) -> None:
    """Beside a compiled step, the ops' own dispatches are the evidence, and here they cannot
    be told apart: the ops compiled 4.89 s in the judged requests (each new prompt length a new
    shape; JAX's library functions among them compile as jitted calls the dispatch metric does
    not time), more than the 2.15 s their dispatches took. The card says so, is low, and states
    the idle time left once compiling is out (0.69 s a request) as the most they could save."""
    report, _ = served
    card = _card(report, "op_by_op")
    evidence = card.evidence.to_dict()
    assert card.severity == "low" and card.cost_s == 0.0
    assert evidence["dispatches_per_step"] == 111.0
    assert evidence["device_idle_s_per_step"] == pytest.approx(0.685, abs=0.01)
    assert f"{COMPILING_S:.2f} s of the idle time was compiling" in card.detail
    assert "Cost: not measured: the ops' own compiles (4.89 s in these steps" in card.detail


def test_a_request_that_compiles_is_host_bound_outside_its_compile(served) -> None:
    """The device-idle card takes each request's time outside its compiles (687.5 ms of a
    13.3 s median request), not the compile, as the time the device waited for the host."""
    report, _ = served
    (idle,) = [f for f in report.findings if "device idle" in f.title]
    assert "of the 687.54 ms median step" in idle.detail
    assert idle.cost_s == pytest.approx(3 * 0.68006, rel=0.01)
    # where the host's traced time went, compiles out (the module loop's 9.85 s a request held
    # them); the card stands at the sampler's call, not at the script's top-level code
    assert "<module> (gemma_serve.py:1) 495.34 ms a step" in idle.detail
    assert idle.location.endswith("gemma/sampler.py:499")
    assert "The program's own <module>" not in idle.fix


def test_the_model_built_op_by_op_is_the_setup_to_jit(served) -> None:
    """Building the NNX model outside jit compiled its initializers one by one: 184 compiles
    at transformer.py and modules.py, which the compile card names with NNX's fix."""
    report, _ = served
    card = _card(report, "compile_time")
    assert card.location.endswith("gemma/transformer.py:105")
    assert "nnx.jit(lambda: Model(" in card.fix


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory):
    return analysed(tmp_path_factory, "gemma_serve_fixed")["gemma_serve_fixed"][0]


def test_the_one_length_twin_has_no_recompile_and_its_host_work_is_named(fixed) -> None:
    """The twin (`--fixed 96 --rounds 2`, `chip_serve.sh 3`): one compile of the sampler, its
    twelve requests host-bound (the device busy 43 ms of a 628 ms request outside compiles;
    the trace's Python shows 338 ms a request in `tolist` of the logits the sampler returns by
    default, 116 ms in `nnx.split` of the model). The idle card stands at the sampler's call;
    the 137 ops a request outside jit are charged their own dispatches, 17.43 ms a request,
    not the 423 ms of idle time main's code gave them."""
    assert not [f for f in fixed.findings if f.rule == "recompile"]
    (idle,) = [f for f in fixed.findings if "device idle" in f.title]
    assert idle.severity == "high" and "__call__ (sampler.py:430)" in idle.detail
    assert "The program's own __call__ (sampler.py:430) held 83%" in idle.fix
    card = _card(fixed, "op_by_op")
    assert card.cost_s == pytest.approx(10 * 17.43e-3, rel=0.01)
    assert "They also compiled for 1.94 s in these steps" in card.detail
    assert card.evidence.to_dict()["cost_basis"].startswith("host dispatch time")
