"""Steps wherever the loop lives (issue 26): the step rule's decisions and the step-structure test.

Pure logic on hand-built inputs; the real runs that these rules were measured on are the corpus
programs corpus_hf_trainer.py and corpus_xla_dynamo_train.py (tests/test_corpus.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from tpuscope.analyze.judge import phases
from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.collect.xla import library_loops
from tpuscope.collect.xla.library_loops import LibraryLoops
from tpuscope.collect.xla.steps import (
    COLLECTIVE,
    COMPILE_PRELUDE,
    DYNAMO_CALL,
    DYNAMO_TRACE,
    END,
    LIBRARY_CALL,
    LOADER,
    LOADER_START,
    OPTIMIZER,
    StepRule,
    boundary_name,
)


def _rule() -> StepRule:
    return StepRule({"UncachedCompile": 0, "CachedCompile": 0, "ExecuteComputation": 0})


def test_syncs_inside_a_call_never_end_a_step() -> None:
    rule = _rule()
    for boundary in (COLLECTIVE, DYNAMO_TRACE):
        assert rule.end(boundary, 1, 1, 1, True) is None


def test_a_compiled_call_with_only_cached_graph_runs_is_a_step() -> None:
    """dynamo's _run_cached_graph moves no compile-cache counter: its runs are the launched work."""
    rule = _rule()
    assert rule.end(DYNAMO_CALL, 0, 0, 0, False) is None  # nothing ran: not a step
    assert rule.end(DYNAMO_CALL, 0, 0, 0, False, direct=3) == 3


def test_a_librarys_boundary_waits_for_the_optimizer_step() -> None:
    """A Trainer's logging pass: loader next (step), mark_step after the optimizer step (step),
    then boundaries with work but no optimizer step since: part of the iteration, until END."""
    rule = _rule()
    # args: boundary, lookups so far, lookups / executions since the last step, other work
    assert rule.end(LOADER, 1, 1, 1, False, library=True) is None  # the setup's: top of iteration 0
    rule.optimizer_steps = 1
    assert rule.end(LOADER, 2, 2, 2, False, library=True) == 2  # iteration 0 (+ the setup's graph)
    rule.optimizer_steps = 2
    assert rule.end("mark_step", 3, 1, 1, False, library=True) == 1  # iteration 1, logging
    assert rule.end("sync", 4, 1, 1, True, library=True) is None  # e.g. the flush after the loop
    assert rule.end(LOADER, 5, 2, 2, False, library=True) is None  # gives way after mark_step
    assert rule.end(END, 5, 2, 2, True, library=True) == 2  # the end always closes


def test_the_users_own_boundaries_are_never_held_back() -> None:
    """An eval loop after training has no optimizer step: its syncs still end steps."""
    rule = _rule()
    rule.optimizer_steps = 5
    assert rule.end("mark_step", 1, 1, 1, False) == 1
    assert rule.end("mark_step", 2, 1, 1, False) == 1


def test_before_any_optimizer_step_a_librarys_boundary_ends_steps() -> None:
    rule = _rule()
    assert rule.end("mark_step", 1, 1, 1, False, library=True) == 1
    assert rule.end("mark_step", 2, 1, 1, False, library=True) == 1


class _Optimizer:
    """Stands for a torch optimizer: the rule keeps only weak references to it."""


def test_a_loop_with_no_sync_is_one_step_per_optimizer_step() -> None:
    """No sync at all (PyTorch's Quickstart on torch_xla): the same optimizer stepping again with
    no sync since ends a step, with or without work (a read every few batches); the first ends
    none, and the work after the last is the last iteration, not the after-the-loop "end"."""
    rule, opt = _rule(), _Optimizer()
    assert not rule.optimizer_stepped(opt)  # iteration 0's: its read comes after it
    for _ in range(4):
        assert rule.optimizer_stepped(opt)
        assert rule.end(OPTIMIZER, 1, 0, 0, False) == 0  # a step with nothing launched
    del opt  # the program's optimizer is freed before the profiler closes (a main() returned)
    assert rule.end_boundary() == "after the last optimizer.step"
    assert rule.end("after the last optimizer.step", 2, 1, 1, True) == 1
    assert rule.end_boundary() == END  # profile() closes twice: the second close is no step
    assert rule.end(END, 2, 0, 0, False) is None


def test_a_loop_that_syncs_never_steps_at_its_optimizer() -> None:
    """`.item()` before optimizer.step(), torch_xla.sync() after it: the sync between two
    optimizer steps keeps them from ending steps, the first iteration's included."""
    rule, opt = _rule(), _Optimizer()
    for lookups in range(1, 4):
        assert not rule.optimizer_stepped(opt)
        assert rule.end("sync", lookups, 1, 1, False) == 1
    assert rule.end_boundary() == END


def test_only_the_first_optimizer_to_step_again_marks_the_loop() -> None:
    """A GAN steps two optimizers per iteration: only one of them ends steps."""
    rule, d, g = _rule(), _Optimizer(), _Optimizer()
    assert not rule.optimizer_stepped(d) and not rule.optimizer_stepped(g)
    assert rule.optimizer_stepped(d) and not rule.optimizer_stepped(g)
    assert rule.optimizer_stepped(d) and not rule.optimizer_stepped(g)


def test_optimizer_steps_inside_a_compiled_step_end_no_step() -> None:
    """torch_xla.compile syncs before and after the function: k optimizer steps in it are one."""
    rule, opt = _rule(), _Optimizer()
    assert rule.end(COMPILE_PRELUDE, 0, 0, 0, False) is None
    assert not any(rule.optimizer_stepped(opt) for _ in range(3))
    assert rule.end("torch_xla.compile", 1, 1, 1, False) == 1


def test_a_new_optimizer_marks_once_the_old_one_is_gone() -> None:
    rule, old = _rule(), _Optimizer()
    assert not rule.optimizer_stepped(old) and rule.optimizer_stepped(old)
    del old  # an optimizer made anew (a new fold): the old marker is freed
    new = _Optimizer()
    assert not rule.optimizer_stepped(new) and rule.optimizer_stepped(new)


def _steps(*rows: tuple[int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"host": "h", "pid": 1, "step": s, "executions": e, "compiles": c} for s, e, c in rows]
    )


def test_one_step_whose_executables_all_ran_once_has_no_step_structure() -> None:
    assert not has_step_structure(_steps((0, 5, 5)))
    assert not has_step_structure(_steps((0, 0, 0)))
    assert not has_step_structure(pd.DataFrame())


def test_an_executable_run_again_or_two_steps_are_step_structure() -> None:
    assert has_step_structure(
        _steps((0, 45, 33))
    )  # generate(): decode graphs re-run from the cache
    assert has_step_structure(_steps((0, 1, 1), (1, 1, 0)))
    two = pd.concat([_steps((0, 3, 3)), _steps((0, 4, 1)).assign(pid=2)])
    assert has_step_structure(two)  # any process with structure


def test_imported_steps_without_the_columns_count_as_structured() -> None:
    assert has_step_structure(pd.DataFrame({"step": [0], "wall_ns": [10]}))


def test_a_loaders_first_sync_of_a_pass_ends_no_step() -> None:
    """Between two loader passes the program reads a value (an eval's `correct.item()`, then
    `xm.mesh_reduce`): the next pass's first sync is the top of its iteration 0, so that work
    goes into it (corpus_xla_mnist.py, corpus_xla_mesh_reduce.py: steps = iterations)."""
    rule = _rule()
    assert rule.end(LOADER_START, 0, 0, 0, False) is None  # pass 1 starts
    assert rule.end(LOADER, 1, 1, 1, False) == 1  # iteration 0 (the loader is the step marker)
    assert rule.end(LOADER, 2, 1, 1, False) == 1  # iteration 1, at the pass's StopIteration sync
    assert rule.end(LOADER, 2, 0, 0, False) is None  # its second sync: nothing launched since
    assert rule.end(LOADER_START, 4, 2, 2, True) is None  # the read and mesh_reduce's graphs
    assert rule.end(LOADER, 5, 3, 3, True) == 3  # pass 2's iteration 0 carries them


def test_boundary_name_tells_a_passs_first_sync_from_the_next() -> None:
    """The `next` frame of torch_xla's PerDeviceLoader names the boundary, and its loader
    object tells a pass's first sync (a new loader per `iter()`) from the later ones."""
    namespace: dict[str, object] = {}
    code = compile(
        "class PerDeviceLoader:\n    def next(self):\n        return probe()\n",
        "/x/site-packages/torch_xla/distributed/parallel_loader.py",
        "exec",
    )
    exec(code, {"probe": lambda: boundary_name(depth=2)}, namespace)
    loader_class = namespace["PerDeviceLoader"]
    first, second = loader_class(), loader_class()  # type: ignore[operator]
    assert first.next() == (LOADER_START, False)
    assert first.next() == (LOADER, False)
    assert second.next() == (LOADER_START, False)  # a new pass


def _kinds(*boundaries: str) -> pd.DataFrame:
    return pd.DataFrame(
        [{"host": "h", "pid": 1, "step": i, "boundary": b} for i, b in enumerate(boundaries)]
    )


def test_a_setup_sync_before_a_loop_at_another_boundary_is_no_step() -> None:
    """corpus_xla_dynamo_train.py: a setup `torch_xla.sync()`, then 12 compiled calls; the
    setup step is its own phase and the warm-up counts from the loop's first step."""
    steps = _kinds("sync", *["torch.compile"] * 4, "end")
    phase = phases(steps, warmup=2).tolist()
    assert phase == ["setup", "warmup", "warmup", "judged", "judged", "after"]


def test_an_evaluation_before_the_training_loop_is_setup() -> None:
    """optax's CIFAR ResNet notebook evaluates its test batches before its first training
    step: the collector's steps are the evaluation's until the training step takes over
    (collect/jax/steps.py), and never again after. Those leading steps are setup; a leading
    kind that recurs, or a lead as long as what follows, is the loop's."""
    steps = _kinds(*["jit:eval_step"] * 5, *["jit:train_step"] * 8, "end")
    phase = phases(steps, warmup=2).tolist()
    assert phase == ["setup"] * 5 + ["warmup"] * 2 + ["judged"] * 6 + ["after"]
    setup_sync = _kinds("sync", *["jit:eval_step"] * 3, *["jit:train_step"] * 6)
    assert phases(setup_sync, 1).tolist()[:5] == ["setup"] * 4 + ["warmup"]
    flips = _kinds(*["jit:eval_step"] * 3, *["jit:train_step"] * 6, "jit:eval_step")
    assert "setup" not in phases(flips, 1).tolist()
    longer = _kinds(*["jit:eval_step"] * 6, *["jit:train_step"] * 6)
    assert "setup" not in phases(longer, 1).tolist()


def test_a_lead_with_more_steps_but_less_time_than_the_loop_is_setup() -> None:
    """jax-ai-stack's miniGPT tutorial: 256 tokens generated, a jitted call each, before 250
    training steps. The lead has more steps than the loop (under twice as many) but under a
    quarter of its time outside compiles (the first generation step compiled for seconds):
    setup. A quarter or more, no wall times, or more than twice the steps: the loop's."""
    boundaries = [*["jit:generate_step"] * 12, *["jit:train_step"] * 10]
    steps = _kinds(*boundaries).assign(
        wall_ns=[9_000_000_000] + [3_000_000] * 11 + [60_000_000] * 10, compile_ns=0
    )
    steps.loc[0, "compile_ns"] = 8_990_000_000
    phase = phases(steps, warmup=2).tolist()
    assert phase == ["setup"] * 12 + ["warmup"] * 2 + ["judged"] * 8
    slow = steps.assign(wall_ns=[60_000_000] * 12 + [60_000_000] * 10, compile_ns=0)
    assert "setup" not in phases(slow, 2).tolist()
    quarter = steps.assign(wall_ns=[50_000_000] * 12 + [240_000_000] * 10, compile_ns=0)
    assert "setup" not in phases(quarter, 2).tolist()  # 600 ms against 4 x 600: not under
    untimed = steps.assign(wall_ns=[None] * 12 + [60_000_000] * 10)
    assert "setup" not in phases(untimed, 2).tolist()  # no time, no judging by it
    # a loop of short steps, then two long ones of another kind (a checkpoint, an evaluation):
    # more than twice as many steps as what follows, so the loop, however little its time
    tail = _kinds(*["mark_step"] * 20, "sync", "sync").assign(
        wall_ns=[10_000_000] * 20 + [1_500_000_000] * 2, compile_ns=0
    )
    assert "setup" not in phases(tail, 2).tolist()


def test_a_loop_of_one_boundary_kind_has_no_setup() -> None:
    assert "setup" not in phases(_kinds(*["mark_step"] * 4), 1).tolist()
    # a trainer's loop passes two kinds, both recurring (loader next, the logging mark_step)
    trainer = _kinds("MpDeviceLoader", "MpDeviceLoader", "mark_step", "MpDeviceLoader", "mark_step")
    assert "setup" not in phases(trainer, 1).tolist()
    # too short to tell a setup from a loop: two steps of two kinds are both steps
    assert "setup" not in phases(_kinds("sync", "mark_step"), 1).tolist()


def test_an_outermost_library_loop_call_is_one_boundary_and_uninstall_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """collect/xla/library_loops: a module named in ENTRY_POINTS is patched when it is imported
    (the real import system, a module file on sys.path), each outermost call's return calls the
    collector once (a nested call, as a model's generate() calling super().generate(), does
    not), an exception still returns through it, and uninstall restores the function."""
    (tmp_path / "fake_generation.py").write_text(
        "class Mixin:\n"
        "    def generate(self, n, fail=False):\n"
        "        if fail:\n            raise ValueError('no')\n"
        "        return self.generate(n - 1) if n else 'done'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(library_loops.ENTRY_POINTS, "fake_generation", ("Mixin", "generate"))
    returned: list[int] = []
    loops = LibraryLoops(lambda: returned.append(1)).install()
    try:
        import fake_generation  # type: ignore[import-not-found]

        assert fake_generation.Mixin().generate(2) == "done"
        assert returned == [1]  # three nested calls, one boundary
        with pytest.raises(ValueError):
            fake_generation.Mixin().generate(0, fail=True)
        assert returned == [1, 1]
    finally:
        loops.uninstall()
        sys.modules.pop("fake_generation", None)
    assert fake_generation.Mixin().generate(1) == "done" and returned == [1, 1]
    assert loops._finder is None and not any(
        isinstance(f, library_loops._PostImport) for f in sys.meta_path
    )


def test_a_module_imported_before_the_collector_is_patched_at_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fake_generation_early.py").write_text(
        "class Mixin:\n    def generate(self):\n        return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(library_loops.ENTRY_POINTS, "fake_generation_early", ("Mixin", "generate"))
    import fake_generation_early  # type: ignore[import-not-found]

    returned: list[int] = []
    loops = LibraryLoops(lambda: returned.append(1)).install()
    try:
        fake_generation_early.Mixin().generate()
    finally:
        loops.uninstall()
        sys.modules.pop("fake_generation_early", None)
    assert returned == [1]


def test_the_first_boundary_after_a_library_loop_call_gives_way() -> None:
    """tests/programs/idioms.py --generate: `generate()` then `torch_xla.sync()` per iteration; the
    sync runs the outputs' pending graph, which goes into the next call's step: 1 call, 1 step."""
    rule = _rule()
    assert rule.end(LIBRARY_CALL, 5, 5, 5, True) == 5  # the call's forwards and reads
    assert rule.end("sync", 6, 1, 1, False) is None  # the outputs' graph: carried
    assert rule.end(LIBRARY_CALL, 9, 4, 4, True) == 4  # the next call (+ the carried graph)
    assert rule.end("sync", 9, 0, 0, False) is None
    assert rule.end("sync", 10, 1, 1, False) == 1  # a second boundary is a step again
