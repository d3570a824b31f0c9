"""The type checker over the store, the analysis with its contract, and the rules (issue 28).

`[tool.mypy]` in pyproject.toml names the packages. The analysis contract
(tpuscope/analyze/contract.py) is what every surface reads as attributes: a key renamed there
fails here, not as a silent None in one report. mypy keeps its incremental cache in the
temporary folder (outside the checkout), so a second run on the same machine takes seconds.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import ROOT


def test_mypy_is_clean_on_the_store_the_analysis_and_the_rules() -> None:
    cache = Path(tempfile.gettempdir()) / "tpuscope-mypy-cache"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout
