"""The worked overlapped op of docs/tp_gemm.md runs as printed and equals all-gather + matmul
on 1-3 ranks, with rows per rank that do not fill a tile, over repeated calls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ditron

from .poison import poison_empty
from .test_tp_gemm import _close, _gather, _host_group

DOC = Path(__file__).resolve().parents[2] / "docs" / "tp_gemm.md"


def _example() -> str:
    """The example's code, after blank lines that put it at its own lines of the doc (a
    traceback through it then names the doc's lines)."""
    text = DOC.read_text()
    start = text.index("A worked example, an overlapped all-gather + GEMM")
    found = re.search(r"```python\n(.*?)```", text[start:], re.S)
    return "\n" * text[: start + found.start(1)].count("\n") + found.group(1)


def _example_case(code: str, m: int, K: int, N: int, calls: int) -> int:
    poison_empty()
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)  # the doc's imports and my_ag_gemm
    w = ditron.world()
    for call in range(calls):
        torch.manual_seed(100 * call + w.rank)
        a = torch.randn(m, K).to(w.device)
        torch.manual_seed(100 * call + 99)  # the same weight on every rank
        b = torch.randn(N, K).to(w.device).t()  # a transposed linear weight
        _close(f"call {call}", scope["my_ag_gemm"](a, b), _gather(a).double() @ b.double(),
               torch.float32)
        # the doc's caveat: a slow peer may still read this call's shard
        dist.barrier(group=_host_group())
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_tp_gemm_docs_example(world_size, backend):
    code = _example()
    assert "def my_ag_gemm(a, b):" in code
    assert ditron.launch(_example_case, world_size, code, 37, 48, 40, 3,
                         backend=backend) == [3] * world_size
