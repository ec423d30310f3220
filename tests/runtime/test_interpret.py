"""The CPU backend arranges Triton's interpreter itself, whatever the import order."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

from ditron.runtime import interpret
from ditron.runtime.backends import get_backend

SCRIPT = """
import torch, triton, triton.language as tl   # triton first: its stdlib is already compiled
import ditron

@triton.jit
def k(x, n):
    for i in range(0, n):                      # runtime bound (NumPy >= 2.4 scalar patch)
        tl.store(x + i, tl.cdiv(i + n, 4))     # a Triton stdlib @jit helper

x = torch.zeros(6, dtype=torch.int32)
k[(1,)](x, 6)
print(x.tolist())
"""


def test_triton_imported_before_ditron():
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "DITRON_RECORD_LAUNCHES")}
    env["DITRON_BACKEND"] = "cpu"
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([-(-(i + 6) // 4) for i in range(6)])


def test_cuda_backend_refuses_the_interpreter():
    """The interpreter (on in this process, for the CPU backend) cannot run the cuda
    backend: preparing a process for it says so before touching CUDA, instead of failing
    later inside an interpreted kernel."""
    assert interpret.active()
    with pytest.raises(RuntimeError, match=r"ditron cuda backend: Triton's interpreter "
                                           r"\(TRITON_INTERPRET=1\) cannot run the cuda"):
        get_backend("cuda").prepare_process(torch.device("cuda", 0), 1)


@triton.jit
def _cast_to_bf16(x, y, z, n, BLOCK: tl.constexpr):
    """``y = x.to(bf16)`` and ``z = x`` stored into bf16 (module level: CI's compile check
    finds the kernels it records by their qualified names)."""
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    tl.store(y + offs, v.to(tl.bfloat16), mask=offs < n)
    tl.store(z + offs, v, mask=offs < n)  # the store casts


@pytest.mark.skipif(not interpret.active(), reason="the CPU backend's interpreter")
def test_casts_to_bf16_round_as_torch_and_the_gpu_do():
    """fp32 values cast to bf16 in a kernel (``.to`` and a store into a bf16 tensor) come
    out bit for bit as torch rounds them (to the nearest, ties to even; inf, NaN,
    subnormals and overflow included). Triton's interpreter truncated: about a quarter
    of them came out 1 ulp low."""
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    ties = (torch.randint(0, 2**15, (64,), generator=g, dtype=torch.int32) << 16 | 0x8000)
    x = torch.cat([torch.randn(4000, generator=g) * 10.0 ** torch.randint(-40, 38, (4000,),
                                                                          generator=g),
                   ties.view(torch.float32),
                   torch.tensor([float("nan"), float("inf"), -float("inf"), 3.4e38, -0.0,
                                 1e-40, -3e-39, 0.0])])
    y, z = (torch.full(x.shape, 7.0, dtype=torch.bfloat16) for _ in range(2))
    _cast_to_bf16[(1,)](x, y, z, x.numel(), BLOCK=8192)
    ref = x.to(torch.bfloat16)
    for got in (y, z):
        same = (got.view(torch.int16) == ref.view(torch.int16)) | (got.isnan() & ref.isnan())
        assert bool(same.all()), (int((~same).sum()), x[~same][:5], got[~same][:5],
                                  ref[~same][:5])


@triton.jit
def _plus_one(v):
    return v + 1


@triton.jit
def _helpers_in_a_loop(x, n, BLOCK: tl.constexpr):
    """Eight calls of a @jit helper of this module, and one of Triton's stdlib (its module
    sees ``triton.language.core``, not ``triton.language``)."""
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(0, 8):
        v = _plus_one(v)
    tl.store(x + offs, v + tl.cdiv(n, 4), mask=offs < n)


@pytest.mark.skipif(not interpret.active(), reason="the CPU backend's interpreter")
def test_jit_helpers_do_not_patch_the_language_again(monkeypatch):
    """A launch patches ``triton.language`` for the interpreter and undoes it at its end; a
    @jit helper called inside it patched it all over again on every call (Triton's
    ``_patch_lang``: about a millisecond each, a fifth of a collective's CPU time). Now
    only a helper seeing a module the launch did not patch (the stdlib's) does; results
    are the same, and the launch's patches are still undone."""
    from triton.runtime import interpreter

    patched = []
    original = interpreter._patch_builtin

    def counted(pkg, *args):
        patched.append(pkg)
        return original(pkg, *args)

    monkeypatch.setattr(interpreter, "_patch_builtin", counted)
    x = torch.arange(10, dtype=torch.int32)
    for call in range(1, 3):
        patched.clear()
        _helpers_in_a_loop[(1,)](x, 10, BLOCK=16)
        assert x.tolist() == [i + call * (8 + 3) for i in range(10)]
        # the launch's four (tl, tl.tensor, tl.math, descriptors) and the stdlib helper's
        # (tl.core, and the modules it sees too once Triton has rewritten it): at most six;
        # before, four more for each of the eight calls of the helper (39 in all)
        assert len(patched) <= 10, [getattr(p, "__name__", p) for p in patched]
    assert tl.core.is_builtin(tl.load) and tl.core.is_builtin(tl.tensor.__add__)
