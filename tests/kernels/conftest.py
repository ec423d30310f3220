"""Fixtures of the kernel tests: the device a backend runs on, and poisoned outputs."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def device(backend) -> str:
    return "cuda" if backend == "cuda" else "cpu"


@pytest.fixture
def poisoned():
    """``torch.empty`` filled (NaN, or the integer maximum) while a test runs, so an output
    element a kernel never writes fails its comparison."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(False)
