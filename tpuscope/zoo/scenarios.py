"""What each zoo scenario runs and what its ground truth says a correct tool reports.

A scenario is a program in programs/ (the user's script of the cell), its arguments, tpuscope's
warm-up for it, and `expected(truth)`: the findings the counters imply, as the rules' names
(recompile, cpu_fallback with its ops, host_sync), so the table can say whether tpuscope agreed.
- train: AdamW steps on one static batch; steps 0-1 compile (the step, then the optimizer's
  state), so with warm-up 2 nothing may compile in a judged step.
- train-varlen: the same over lengths 16, 24, 16, 32: each new length compiles after warm-up.
- eager: the train loop in torch_xla's eager mode (op by op): torch_xla's EagerOpExecuteTime
  metric samples every op run eagerly; tpuscope must report `op_by_op` iff a judged step has
  such samples (so in no other scenario). Warm-up 2, as for train: the optimizer's second step
  may run an op of its own for the first time (cohere: 1 new eager op at step 1, then none),
  a first compile of a distinct graph, not a recompile.
- tensorcore: one training step at the real default widths, compiled and never run (placeholder
  weights); the truth is the widths' problems on the --target (widths.expected).
- generate: two identical generate() requests with a sync after each; warm-up 1 (the first
  request), so the second request, which repeats the first, must compile nothing; and the
  counters read at every token say whether the decode compiles again per token (a decode
  token after the first compiling anything is a recompile: its shapes are the first's).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpuscope.zoo.truthread import CellTruth


@dataclass(frozen=True)
class Scenario:
    name: str
    program: str  # file in tpuscope/zoo/programs/
    args: tuple[str, ...]  # after MODEL_TYPE CLASS TASK
    warmup: int  # tpuscope's --warmup: the steps the truth does not judge
    phase: str  # the truth's mark prefix of one step ("step:", "request:")
    deep: bool = False  # run under tpuscope --deep --target (the TensorCore lint reads the HLO)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("train", "zoo_train.py", ("4", "16"), 2, "step:"),
        Scenario("train-varlen", "zoo_train.py", ("6", "16,16,24,16,32,16"), 2, "step:"),
        Scenario("generate", "zoo_generate.py", ("2", "4"), 1, "request:"),
        Scenario("eager", "zoo_train.py", ("3", "16", "eager"), 2, "step:"),
        Scenario("tensorcore", "zoo_tensorcore.py", ("1024",), 0, "step:", deep=True),
    ]
}


def expected_tensorcore(truth: CellTruth, target: str) -> dict[str, object]:
    """tensorcore: the problem kinds the real widths (and the traced graph's f32 dots) imply on
    the target; the program compiles one step and runs none, so tpuscope counts 1 step or none."""
    kinds = (truth.extra.get("expected_tensorcore") or {}).get(target, [])
    return {"tensorcore": sorted(kinds)}


def expected(scenario: Scenario, truth: CellTruth, target: str = "v5e") -> dict[str, object]:
    """The findings the counters imply: {'recompile': bool, 'cpu_fallback': sorted ops,
    'host_sync': bool, 'steps': the iteration count}."""
    if scenario.deep:
        return expected_tensorcore(truth, target)
    judged = truth.groups(scenario.phase)[scenario.warmup :]
    reads = [truth.value_reads(g) for g in judged]
    # generate: the first request is the warm-up (its per-token graphs are distinct graphs of one
    # pass, issue 26; the table still shows them, `per_token`); a recompile is the second, identical
    # request compiling again (issue 27's truth for the scenario)
    return {
        "recompile": any(truth.step_work(g).get("UncachedCompile", 0) > 0 for g in judged),
        "cpu_fallback": truth.fallback_ops,
        # host_sync: a read a step on average, in at least half the steps (detect/host_sync)
        "host_sync": bool(reads)
        and sum(reads) / len(reads) >= 1
        and 2 * sum(r > 0 for r in reads) >= len(reads),
        "steps": int(truth.extra.get("iterations", 0)),
        "op_by_op": any(truth.step_work(g).get("metric:EagerOpExecuteTime", 0) > 0 for g in judged),
    }
