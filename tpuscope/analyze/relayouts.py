"""Arrays relaid at a step's boundary, measured: copies that only change the physical layout of
one of the step's arguments on its way in, or of one of its results on its way out. Pure pandas
over the trace's HLO (stage `tpu_trace`, with layouts).

A jitted step takes and returns its arrays in their default layout (row-major unless the
program asks otherwise). Where the step's ops want an array in another one (XLA put a merged
KV cache's time axis in the lanes), XLA copies it to that layout each call and copies the
result back: a `copy` whose layout differs from its operand's, of a parameter of the
entry computation or into its ROOT tuple. The copies do no arithmetic; they move the whole array
twice a call. On a v5e (docs/tpu.md) a decoder whose caches were (batch, time, heads x
head_dim) spent 2.76 ms of each 4.06 ms device token in 16 such copies of 64 MiB arrays; with
the heads split, (batch, time, heads, head_dim), it had none and took 1.64 ms a token. Copies inside the step
(an attention's operands transposed for its matmuls) are not counted: in the v5e's training
traces they took 1.6-2.5% of the device time, and no change outside the compiler moves them.
"""

from __future__ import annotations

import pandas as pd


def boundary_relayouts(top: pd.DataFrame, modules: pd.DataFrame) -> pd.DataFrame:
    """The copies of each module's entry computation that relay one of its parameters, or feed
    its ROOT tuple, in a layout other than their operand's: module, parent (the copy), shape,
    side ('argument' or 'result'), array (the argument's name in the program, as JAX's op_name
    gives it: `caches[0]['k']`), layouts (operand's -> copy's, minor-to-major). `modules`
    (hlo_modules) names each module's entry and ROOT; a module stored without them (before
    those columns) has every top-level computation taken as its entry and every tuple as its
    ROOT. A copy inside a loop's body, which runs each iteration, is never the boundary's."""
    if "layout" not in top or top.empty:
        return pd.DataFrame()
    outer = top[top["fusion"].isna()].drop_duplicates(["module", "name"])
    entries, roots = _entries(modules)
    in_entry = [
        entries.get(module) in (None, computation)
        for module, computation in zip(outer["module"], outer["computation"], strict=True)
    ]
    outer = outer[in_entry]
    copies = outer[(outer["opcode"] == "copy") & outer["layout"].notna()]
    if copies.empty:
        return pd.DataFrame()
    at = {key: i for i, key in enumerate(zip(outer["module"], outer["name"], strict=True))}
    results = _results(outer, roots)
    rows: list[dict[str, str]] = []
    for row in copies.itertuples():
        operands = list(row.operands) if row.operands is not None else []
        found = at.get((row.module, operands[0])) if operands else None
        if found is None:  # an operand outside the entry's top-level ops
            continue
        source = outer.iloc[found]
        if pd.isna(source["layout"]) or source["layout"] == row.layout:
            continue
        argument = source["opcode"] == "parameter"
        if not argument and (row.module, row.name) not in results:
            continue
        rows.append(
            {
                "module": row.module,
                "parent": row.name,
                "shape": row.shape,
                "side": "argument" if argument else "result",
                "array": _name(source) if argument else "",
                "layouts": f"{{{source['layout']}}} -> {{{row.layout}}}",
            }
        )
    return pd.DataFrame(rows)


def _entries(modules: pd.DataFrame) -> tuple[dict[str, str], dict[str, str]]:
    """(module -> its entry computation, module -> its ROOT instruction), where stored."""
    if modules.empty or "entry" not in modules or "root" not in modules:
        return {}, {}
    known = modules.dropna(subset=["entry", "root"]).drop_duplicates("module")
    return (
        dict(zip(known["module"], known["entry"], strict=True)),
        dict(zip(known["module"], known["root"], strict=True)),
    )


def _results(outer: pd.DataFrame, roots: dict[str, str]) -> set[tuple[str, str]]:
    """(module, instruction) of what each module gives back: its ROOT and the operands of its
    ROOT tuple (of any top-level tuple, where the ROOT is not stored)."""
    tuples = outer[outer["opcode"] == "tuple"]
    given = {(module, root) for module, root in roots.items()}
    for module, name, operands in zip(
        tuples["module"], tuples["name"], tuples["operands"], strict=True
    ):
        if operands is not None and roots.get(module, name) == name:
            given.update((module, operand) for operand in operands)
    return given


def _name(parameter: pd.Series) -> str:
    """The argument's name in the program (JAX's op_name of the parameter), else its HLO name."""
    name = parameter["op_name"]
    text = name if isinstance(name, str) and name else str(parameter["name"])
    return text.replace("\\'", "'")  # HLO text escapes the quotes of a pytree key
