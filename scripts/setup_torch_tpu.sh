#!/usr/bin/env bash
# The real TorchTPU wheel in its own virtualenv, .venv-torch-tpu (run by setup.sh --test).
#
# torch_tpu 0.2.0 needs torch 2.11-2.15; the main environment has torch 2.9.0 for torch_xla
# 2.9.0, so the two cannot share one environment. The venv is isolated (no
# --system-site-packages): the main environment's torch 2.9 and torch_xla must not be seen
# beside torch 2.13. Nothing installed here is visible to the main environment.
# tests/test_tpu_real.py runs tests/tpu_real/ with this venv's python.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-torch-tpu
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "tpuscope setup: torch 2.13.0 (CPU) + torch_tpu 0.2.0 in $venv" >&2
# torch 2.13.0 is pinned: it is the CPU build (a range would pull a CUDA build of several GB).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "torch==2.13.0" "torch_tpu==0.2.0" "pytest>=8" -e .
