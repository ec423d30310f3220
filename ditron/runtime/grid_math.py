"""Integer arithmetic of launch grids and block sizes, on the host.

``triton.cdiv`` and ``triton.next_power_of_2`` are Triton ``ConstexprFunction`` objects:
called from Python they unwrap their arguments first and cost ~1.7 us a call (triton 3.6),
tens of microseconds per MoE layer at the ~30 calls its launches make. These are the same
functions in plain Python.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers, ``b > 0``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1``; 0 for ``n = 0`` (as Triton's)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


__all__ = ["cdiv", "next_power_of_2"]
