"""The host grid arithmetic equals Triton's on every value the launches meet."""

from __future__ import annotations

import triton

from ditron.runtime.grid_math import cdiv, next_power_of_2


def test_grid_math_matches_triton():
    for n in [*range(0, 2100), 4095, 4096, 4097, 1 << 31, (1 << 31) + 1]:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for b in (1, 2, 3, 16, 64, 127, 128, 256):
            assert cdiv(n, b) == triton.cdiv(n, b), (n, b)
