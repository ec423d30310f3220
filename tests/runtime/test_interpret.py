"""The CPU backend arranges Triton's interpreter itself, whatever the import order."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

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
