"""tpuscope.profile() blocks one after another in one process (a notebook, a sweep): every
block's compiles keep their causes and lines, not only the first block's (torch_xla reads its
debug settings once per process). A real torch_xla program on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tpuscope

PROGRAM = Path(__file__).parent / "programs" / "two_profiles.py"


def test_a_second_profile_block_gets_compile_causes_and_lines(tmp_path: Path) -> None:
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_ids = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("RUN ")]
    assert len(run_ids) == 2
    line = next(
        n
        for n, text in enumerate(PROGRAM.read_text().splitlines(), 1)
        if "two_profiles: sync" in text
    )
    for run_id in run_ids:
        compiles = tpuscope.load_run(run_id, store=tmp_path).compiles
        assert len(compiles) == 2, (run_id, compiles)  # each block compiles its two new shapes
        assert list(compiles["cause"]) == ["user torch_xla.sync"] * 2, run_id
        assert list(compiles["location"]) == [f"{PROGRAM}:{line}"] * 2, run_id
