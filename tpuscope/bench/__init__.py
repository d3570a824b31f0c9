"""The eager-mode benchmark harness: Strict vs Fused vs Debug eager, and compiled, side by side.

    from tpuscope.bench.harness import BenchPlan, run_bench
    result = run_bench(BenchPlan(model="transformer", modes=["strict", "fused"], backends=["torch_xla"]))

Modules: spec (what one measurement is), models / torch_blocks / jax_modes (the bundled
workloads), script (the user's `file.py:factory`), modes + xla_modes / tpu_modes / jax_modes
(how each backend makes each mode), worker (one measurement in its own process, saved as a run),
stats (repeats, noise, speedups), harness (the processes), report (table, JSON, Markdown),
command (the `tpuscope bench` command line).
"""
