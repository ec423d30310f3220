"""TMA engine (Hopper bulk copies on dedicated programs): not implemented yet.

Selecting ``engine="tma"`` raises :class:`NotImplementedError` on every backend rather than
silently running another engine; use ``"sm"`` (load/store programs) or ``"copy_engine"``.
"""

from __future__ import annotations

from .base import Engine, Transfer, register_engine


@register_engine
class TmaEngine(Engine):
    name = "tma"
    can_reduce = False

    def __init__(self, **options) -> None:
        raise NotImplementedError(
            "the 'tma' transfer engine is not implemented yet (it needs Hopper TMA "
            "descriptors; the CPU backend has none); use engine='sm' or 'copy_engine'")

    def issue(self, transfers: list[Transfer]) -> None:  # pragma: no cover - never built
        raise NotImplementedError
