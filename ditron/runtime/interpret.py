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
        _interpret_loaded_stdlib()
        if os.environ.get("DITRON_RECORD_LAUNCHES"):
            from .launch_record import install

            install(os.environ["DITRON_RECORD_LAUNCHES"])


#: why the cuda backend refuses a process (or ranks) with the interpreter on
NOT_WITH_CUDA = ("Triton's interpreter (TRITON_INTERPRET=1) cannot run the cuda backend: "
                 "interpreted kernels work on host copies of their arguments and cannot "
                 "reach the peers' GPU memory. Unset TRITON_INTERPRET, or run the "
                 "interpreter on the CPU backend (backend='cpu')")


def active() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def kernels_interpreted() -> bool:
    """Whether ditron's own kernels were defined as interpreted ones: Triton chose when
    ``import ditron`` decorated them, so a process that imported ditron as the cuda
    backend (``DITRON_BACKEND=cuda``, or a visible GPU) holds GPU kernels even once the
    interpreter is switched on."""
    from triton.runtime.interpreter import InterpretedFunction

    from ..language import core

    return isinstance(core.translate, InterpretedFunction)


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


def _interpret_loaded_stdlib() -> None:
    """Make Triton's own @jit helpers (``tl.cdiv``, ``tl.sum``...) interpretable when
    ``triton`` was imported before the interpreter was switched on.

    Those helpers were decorated at import time as compiled functions, which an interpreted
    kernel cannot call; each is replaced by an interpreted twin of the same Python function.
    """
    import sys

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("triton.language"):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction) and not isinstance(value, InterpretedFunction):
                setattr(module, attr, InterpretedFunction(value.fn))
