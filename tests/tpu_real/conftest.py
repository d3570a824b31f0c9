"""Fixtures of the real-torch_tpu tests (this folder runs only where torch_tpu is installed:
tests/conftest.py leaves it out elsewhere)."""

from __future__ import annotations

import pytest
import torch

from tpuscope.collect.torch_tpu.collector import TorchTpuApi


@pytest.fixture(scope="module")
def api() -> TorchTpuApi:
    return TorchTpuApi.from_package()


@pytest.fixture
def optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)
