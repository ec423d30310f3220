"""Benchmarks run by ``ditron bench NAME`` (one module per NAME)."""

from __future__ import annotations

import json
import math
from typing import Any


def strict(value: Any) -> Any:
    """``value`` with every float that is not finite (a NaN error, an infinite time) as the
    string Python reads back with ``float()``: ``"nan"``, ``"inf"``, ``"-inf"``. Python's
    ``json`` would write ``NaN`` / ``Infinity``, which no other JSON reader accepts."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def write_json(path: str, value: Any) -> None:
    """Write a benchmark's results to ``path`` as strict JSON (:func:`strict`)."""
    with open(path, "w") as f:
        json.dump(strict(value), f, indent=1, allow_nan=False)
