#!/usr/bin/env bash
# Install tpuscope and everything it needs on a fresh machine (idempotent; fast when done).
#   bash scripts/setup.sh          the package with torch 2.9.0 + torch_xla 2.9.0, JAX, Dash
#   bash scripts/setup.sh --test   also the test tools, Debian's chromium + chromedriver, and
#                                  the real torch_tpu wheel in .venv-torch-tpu (setup_torch_tpu.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

extras="xla,jax,xprof,dashboard"
[ "${1:-}" = "--test" ] && extras="all"

# Always (re)install this checkout in editable mode: pip skips what is already satisfied, and
# the installed `tpuscope` then points at this folder, not at another clone.
echo "tpuscope setup: installing Python packages (first time: torch is ~4 GB)" >&2
python3 -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"

# The compiled trace decoder (parse/xplane_jit, built by numba.pycc once per install: ~20 s of
# CPU); without it the numpy decoder reads traces, about 2x slower on big ones.
python3 -m tpuscope.parse.xplane_build >/dev/null ||
  echo "tpuscope setup: the compiled trace decoder was not built; the numpy one reads traces" >&2

if [ "${1:-}" = "--test" ] && ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
  echo "tpuscope setup: installing Debian's chromium and chromium-driver for the browser tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
fi

if [ "${1:-}" = "--test" ]; then
  bash scripts/setup_torch_tpu.sh
fi
