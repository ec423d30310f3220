"""Integer arithmetic of launch grids and block sizes, on the host.

``triton.cdiv`` and ``triton.next_power_of_2`` are Triton ``ConstexprFunction`` objects:
called from Python they unwrap their arguments first and cost ~1.7 us a call (triton 3.6),
tens of microseconds per MoE layer at the ~30 calls its launches make. These are the same
functions in plain Python.
"""

from __future__ import annotations

#: CUDA's largest ``grid.y`` and ``grid.z`` (``grid.x``: 2**31 - 1); a larger launch fails
#: with "invalid argument", while the CPU backend's interpreter takes any grid, so code
#: that splits launches at it must test that with the limit patched
GRID_YZ_MAX = 65535


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers, ``b > 0``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1``; 0 for ``n = 0`` (as Triton's)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


__all__ = ["GRID_YZ_MAX", "cdiv", "next_power_of_2"]
