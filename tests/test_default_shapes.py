"""Per-graph shapes in the default mode (issue 26): every compile row of a real torch_xla run
carries its graph's parameter and result shapes without --deep, so a recompile card names the
dim that changed and a bucketing plan; XLA's dump folder tpuscope adds is gone after the run.

The run is the one test_renderers.py makes (example_run shares it within a session).
"""

from __future__ import annotations

from tpuscope.detect.run_analysis import analyze
from tpuscope.store.run import Run

LENGTHS = [41, 53, 37, 64, 45, 58]  # examples/variable_length.py's first 6 batches (LENGTHS)


def test_variable_length_card_names_dim_sizes_and_buckets_without_deep(example_run) -> None:
    run_dir, proc = example_run("variable_length.py", "--steps", "6")
    assert proc.returncode == 0, proc.stderr
    run = Run(run_dir)
    # each batch is (4, length + 1) tokens: the train step's graph takes it as s64[4,length+1]
    token_shapes = [
        next(s for s in shapes if s.startswith("s64[4,"))
        for shapes in run.compiles["input_shapes"]
        if shapes is not None and any(s.startswith("s64[4,") for s in shapes)
    ]
    assert token_shapes == [f"s64[4,{n + 1}]" for n in LENGTHS]
    assert all(shapes is not None and len(shapes) > 0 for shapes in run.compiles["output_shapes"])
    [card] = [f for f in analyze(run).findings if f.rule == "recompile"]
    churn = card.evidence["shape_churn"]
    assert (churn["arg"], churn["dim"]) == (0, 1) and churn["values"] == sorted(
        n + 1 for n in LENGTHS
    )
    assert (
        churn["buckets"]
        and max(churn["buckets"]) == max(LENGTHS) + 1
        and "pad dim 1 of arg 0" in card.fix
    )
    # tpuscope's own dump folder was emptied as it was read and removed at the end
    assert not list((run_dir / "debug").glob("hlo-*"))
    assert "--xla_dump_to" not in str(
        run.meta.get("env_set", {})
    )  # set in the program's process only
