"""What the timed programs (timed_steps, timed_mlp, timed_jax) share under `--alternate`: the
switch of torch_xla's step hook, and the session's cost figures when the timed loop begins."""

from __future__ import annotations

from typing import Any


def xla_hook_switch() -> tuple[Any, Any, Any] | None:
    """(xla_model, hooked, bare) versions of the function tpuscope wraps in torch_xla, or None
    outside tpuscope run."""
    import torch_xla.core.xla_model as xm

    from tpuscope.collect import autostart

    collectors = [c for c in autostart._active.get("collectors", []) if hasattr(c, "_original")]
    return (xm, xm._run_step_closures, collectors[0]._original) if collectors else None


def cost_now() -> dict[str, int] | None:
    """The session's flush CPU and hooked steps so far (under tpuscope run), else None: the
    flushes before the timed loop (the setup's compile rows, a one-off like the compile hooks,
    which the cost keeps apart) are then not counted per step (overhead.flush_ms_per_step)."""
    from tpuscope.collect.autostart import active_session

    session = active_session()
    if session is None:
        return None
    cost = session.cost
    return {"flush_cpu_ns": cost.flush_cpu_ns, "steps": cost.hook_calls + cost.compile_hook_calls}
