"""What a TPU waits for the host inside a compiled step, from its trace: the device time of the
step's host transfers, per source line.

A host callback in a jitted JAX step (`jax.debug.print`, `jax.pure_callback`, `io_callback`)
compiles on a TPU into a `send` of its operands to the host and a `recv` of its results (a
token for a print), and the device waits in their `send-done` and `recv-done` until the host's
Python has run: the trace times them on its `XLA Ops` line (xprof's categories `host send-done`,
`host recv-done`) with the callback's line in their metadata. On a v5e a `jax.debug.print` of
the loss made a 1.71 ms step wait 2.39 ms a step there (bare trace), and the step took 2.45 ms
more than without it (docs/tpu.md): what the device waited is the callback's cost, measured.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.op_time import MODULE_LINE, OP_LINE, measured_ops
from tpuscope.analyze.waste import trace_stage

HOST_OPCODES = ("send", "send-done", "recv", "recv-done")


NEEDED = ("line", "source", "hlo_module", "hlo_op", "dur_ns", "flops", "bytes_accessed")
COLUMNS = ["source", "kind", "time_s"]


def host_waits(
    events: pd.DataFrame, hlo_ops: pd.DataFrame, steps: list[int] | None = None
) -> pd.DataFrame:
    """Per source line and kind of callback (the HLO op's `op_type`: `debug_print`,
    `pure_callback`, `io_callback`; "" where the HLO does not say): device seconds a traced
    step spent in host transfers written there. Empty without a device trace that has them.
    `steps`: the traced steps judged."""
    if events.empty or any(column not in events for column in NEEDED):
        return pd.DataFrame(columns=COLUMNS)
    lines = events["line"].astype(str)
    ops = events[lines == OP_LINE]
    transfers = ops[_is_host_transfer(ops, hlo_ops)]
    if transfers.empty:
        return pd.DataFrame(columns=COLUMNS)
    per, _ = measured_ops(pd.concat([events[lines == MODULE_LINE], transfers]), steps)
    if per.empty:
        return pd.DataFrame(columns=COLUMNS)
    per = per.dropna(subset=["source"])
    per["kind"] = _kinds(per, trace_stage(hlo_ops))
    return per.groupby(["source", "kind"], as_index=False)["time_s"].sum()[COLUMNS]


def _kinds(per: pd.DataFrame, hlo_ops: pd.DataFrame) -> list[str]:
    """Each op's `op_type` in the trace's HLO ("" where unknown)."""
    if hlo_ops.empty or "op_type" not in hlo_ops:
        return [""] * len(per)
    known = hlo_ops.dropna(subset=["op_type"]).drop_duplicates(["module", "name"])
    types = dict(
        zip(zip(known["module"], known["name"], strict=True), known["op_type"], strict=True)
    )
    keys = zip(per["hlo_module"], per["hlo_op"], strict=True)
    return [str(types.get(key, "")) for key in keys]


def _is_host_transfer(ops: pd.DataFrame, hlo_ops: pd.DataFrame) -> pd.Series:
    """An op is a host transfer by xprof's category, or by its HLO opcode where the trace's
    HLO names it (a device-to-device send is not a host one: xprof calls those `send`)."""
    by_category = (
        ops["hlo_category"].astype(str).str.startswith("host ")
        if "hlo_category" in ops
        else pd.Series(False, index=ops.index)
    )
    if hlo_ops.empty or "opcode" not in hlo_ops:
        return by_category
    top = trace_stage(hlo_ops)
    top = top[top["opcode"].isin(HOST_OPCODES)]
    host = top[
        top.get("op_type", pd.Series("", index=top.index))
        .astype(str)
        .str.contains("callback|debug_print")
    ]
    named = set(zip(host["module"], host["name"], strict=True))
    keys = zip(ops["hlo_module"], ops["hlo_op"], strict=True)
    return by_category | pd.Series([key in named for key in keys], index=ops.index)
