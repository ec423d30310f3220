"""Integer arguments (world sizes, ranks, counts, rows, tile knobs), taken one way everywhere.

An integer argument is a Python ``int`` or any other ``numbers.Integral`` (a NumPy integer,
as read from a config array); a ``bool`` is refused, and so is a float or a tensor even
when it holds a whole number (``True`` ranks or ``4.0`` features are mistakes, and a tensor
would need a device sync to read). Accepted values come back as a plain ``int``, so they key
caches and cross-rank agreement checks alike on every rank.
"""

from __future__ import annotations

import numbers


def as_int(value: object) -> int | None:
    """``value`` as a plain ``int``, or ``None`` when it is not an integer argument."""
    if type(value) is int:  # the common case, ~30x cheaper than the ABC check (hot paths)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def check_int(value: object, what: str, minimum: int = 0, below: int | None = None,
              error: type[Exception] = ValueError) -> int:
    """``value`` as an ``int`` in ``[minimum, below)`` (no upper end when ``below`` is
    ``None``); otherwise ``error`` with "``what`` must be a positive int / an int >= m / an
    int in [m, b), got ``value``"."""
    number = as_int(value)
    if number is None or number < minimum or (below is not None and number >= below):
        if below is not None:
            want = f"an int in [{minimum}, {below})"
        else:
            want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise error(f"{what} must be {want}, got {value!r}")
    return number
