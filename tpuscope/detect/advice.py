"""Advice for the backend that ran: a JAX run never reads torch_xla's APIs in a fix
(MpDeviceLoader, torch_xla.compile, mark_step, PT_XLA_DEBUG), a torch_xla run never JAX's.

A rule whose fix is not wholly its backend's own (recompile's, op_by_op's, host_sync's are
worded per backend where they are made) takes the backend-dependent words from here, by
topic: xla_advice.ADVICE and jax_advice.ADVICE hold the same topics. torch_tpu runs are
PyTorch, and get torch_xla's words until TorchTPU's own are written.
"""

from __future__ import annotations

from tpuscope.detect import jax_advice, xla_advice

TOPICS = tuple(xla_advice.ADVICE)


def for_backend(backend: str, topic: str) -> str:
    """The words of `topic` (a key of xla_advice.ADVICE) for a run of `backend`."""
    return (jax_advice.ADVICE if backend == "jax" else xla_advice.ADVICE)[topic]
