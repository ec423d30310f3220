"""Epoch-like kernel arguments must not be specialised by value.

Triton compiles a separate variant for an integer argument equal to 1 or divisible by 16.
An epoch grows by one per call, so a specialised epoch recompiled the kernel the first time
it reached 16 (measured on 2 H200s: one AG-GEMM call of 0.7 s in a run of 1 ms calls). Every
kernel of the package taking an epoch, signal value or wait target lists it in
``do_not_specialize``.
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import re

import ditron

EPOCH_LIKE = {"epoch", "value", "wait_target"}


def _launched(name: str) -> bool:
    """Whether some module of the package launches ``name`` (``name[grid](...)``, or through
    ``FastKernel(name)``); device functions called from kernels are not specialised on
    their own."""
    pattern = re.compile(rf"\b{name}\[|FastKernel\({name}\)")
    return any(pattern.search(path.read_text())
               for path in pathlib.Path(ditron.__file__).parent.rglob("*.py"))


def _kernels():
    for info in pkgutil.walk_packages(ditron.__path__, "ditron."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            fn = getattr(obj, "fn", None)
            if hasattr(obj, "arg_names") and getattr(fn, "__module__", None) == \
                    module.__name__ and _launched(name):
                yield f"{info.name}.{name}", obj


def _unspecialized(kernel) -> set[str]:
    names = getattr(kernel, "do_not_specialize", None)  # a compiled JITFunction
    if names is None:  # the interpreter keeps the decorator's keyword arguments
        names = getattr(kernel, "kwargs", {}).get("do_not_specialize") or []
    return {kernel.arg_names[n] if isinstance(n, int) else n for n in names}


def test_epoch_arguments_are_not_specialised():
    kernels = dict(_kernels())
    assert "ditron.kernels.gemm.persistent_gemm" in kernels  # the scan finds kernels
    bad = {name: sorted(EPOCH_LIKE & set(k.arg_names) - _unspecialized(k))
           for name, k in kernels.items()}
    bad = {name: args for name, args in bad.items() if args}
    assert not bad, f"epoch-like arguments specialised by value (add do_not_specialize): {bad}"
