"""The chip's committed runs (tests/tpu/runs/NAME: default-mode runs on a TPU v5e, without their
raw traces), analysed afresh from a copy, as the tests of each chip round read them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tpuscope.detect.run_analysis import RunReport, analyze
from tpuscope.store import Run

RUNS = Path(__file__).parent / "tpu" / "runs"


def analysed(factory: pytest.TempPathFactory, *names: str) -> dict[str, tuple[RunReport, Run]]:
    """Each named run copied out of the repository (analysis writes into its run folder) and
    analysed: its report and the run it read."""
    out = {}
    for name in names:
        run = Run(shutil.copytree(RUNS / name, factory.mktemp("chip") / name))
        out[name] = (analyze(run), run)
    return out
