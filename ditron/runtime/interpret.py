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
        _patch_lang_once_per_launch()
        _patch_bf16_rounding()
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


def _patch_lang_once_per_launch() -> None:
    """Call the interpreter's ``_patch_lang`` only where it has something to patch.

    A launch patches ``triton.language`` (every builtin of the modules its kernel sees, and
    of ``tl.tensor``) with interpreted versions, and undoes that when it ends; a
    ``@triton.jit`` helper called inside it (``translate``, ``notify``, ``wait``...) runs
    the same patching again, each call, though the modules it sees are patched already
    (``inspect.getmembers`` of each module: about a millisecond a call, a fifth of the CPU
    time of a collective). A helper call now skips that when every language module it sees
    was patched by the running launch (or by a helper call within it); anything else goes
    through Triton's own, as before. A helper's patches are never undone (Triton's own
    behaviour), and a launch's are undone when it ends, when it forgets what it had patched.
    """
    import sys

    from triton import language as tl
    from triton.runtime import interpreter

    if getattr(interpreter, "_ditron_patch_once", False):
        return
    original = interpreter._patch_lang
    launch_code = interpreter.GridExecutor.__call__.__code__
    helper_code = interpreter.InterpretedFunction.__call__.__code__
    patched: set[int] = set()  # ids of the language modules the running launch patched

    def langs(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_lang(fn):
        seen = langs(fn)
        caller = sys._getframe(1).f_code
        if caller is launch_code:  # a launch: undone when it ends
            scope = original(fn)
            patched.clear()
            patched.update(seen)
            undo = scope.restore

            def restore() -> None:
                patched.clear()
                undo()

            scope.restore = restore
            return scope
        if caller is helper_code and patched and seen <= patched:  # nothing left to patch
            return interpreter._LangPatchScope()
        scope = original(fn)
        patched.update(seen)
        return scope

    interpreter._patch_lang = patch_lang
    interpreter._ditron_patch_once = True


def _round_to_bf16(data):
    """fp32 ``data`` (a NumPy array) as bf16 bits (``uint16``), rounded to the nearest,
    ties to even, as a GPU's ``cvt.rn.bf16.f32`` and torch round; a NaN stays a quiet NaN."""
    import numpy as np

    u = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(data)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded) if nan.any() else rounded


def _patch_bf16_rounding() -> None:
    """Round casts from fp32 to bf16 to the nearest, ties to even, as the GPU does.

    Triton 3.6's interpreter truncates them (and its round-to-nearest mode rounds ties
    away from zero and carries badly): about a quarter of the bf16 values a kernel stored
    came out 1 ulp low, so CPU results differed from the same kernel's on a GPU and from
    torch's. ``.to(tl.bfloat16)`` and ``tl.store`` into a bf16 tensor go through the
    builder's ``cast_impl``; the explicit ``create_fp_to_fp`` of ``fp_downcast_rounding``
    too."""
    from triton import language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_ditron_bf16", False):
        return
    cast, to_fp = builder.cast_impl, builder.create_fp_to_fp

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_round_to_bf16(src.data), dst_type.scalar)
        return cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_round_to_bf16(src.data), dst_type.scalar)
        return to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl, builder.create_fp_to_fp = cast_impl, create_fp_to_fp
    builder._ditron_bf16 = True


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
