"""Shared by the op tests: make every ``torch.empty`` of the calling process NaN-filled."""

from __future__ import annotations

import torch


def poison_empty() -> None:
    """From now on ``torch.empty`` returns NaN-filled memory (integers: their maximum), so an
    output element an op never writes fails the comparison with the reference."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
