"""Arrange Triton's interpreter for the CPU backend.

Triton decides at decoration time whether ``@triton.jit`` builds a GPU kernel or an
interpreted one, so ``TRITON_INTERPRET=1`` must be set before any kernel module is
imported. ``import ditron`` calls :func:`arrange` first thing; rank processes started by
``ditron.launch`` inherit the variable.
"""

from __future__ import annotations

import os

_PATCHED = False


def arrange(backend: str) -> None:
    if backend == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        _patch_scalar_index()
        if os.environ.get("DITRON_RECORD_LAUNCHES"):
            from .launch_record import install

            install(os.environ["DITRON_RECORD_LAUNCHES"])


def active() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def _patch_scalar_index() -> None:
    """Let ``range(n)`` take a kernel's scalar argument under NumPy >= 2.4.

    The interpreter holds a scalar argument as a one-element 1-D array and converts it for
    ``range`` with ``int(array)``, which NumPy 2.4 refuses ("only 0-dimensional arrays can
    be converted to Python scalars"); ``.item()`` accepts it on every NumPy version.
    """
    global _PATCHED
    if _PATCHED:
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patch_lang_tensor
    _PATCHED = True
