"""Tests run with the real torch_tpu, in .venv-torch-tpu (started by tests/test_tpu_real.py).

The only reasons a test here may skip; the main suite's runner accepts no other skip."""

NEEDS_CHIP = "needs a TPU chip: torch_tpu's PCI scan found none on this host"
HAS_CHIP = "a TPU is here"  # for a test whose facts hold only without a chip
