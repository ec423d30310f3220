"""The worked overlapped op of docs/tp_gemm.md runs as printed and equals all-gather + matmul
on 1-3 ranks, with rows per rank that do not fill a tile, over calls back to back, without
the heap growing after its second call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import ditron
from ditron.runtime.world import current

from .poison import poison_empty
from .test_tp_gemm import _close, _gather

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
    cases = []
    for call in range(calls):
        torch.manual_seed(100 * call + w.rank)
        a = torch.randn(m, K).to(w.device)
        torch.manual_seed(100 * call + 99)  # the same weight on every rank
        b = torch.randn(N, K).to(w.device).t()  # a transposed linear weight
        cases.append((a, b, _gather(a).double() @ b.double()))
    used, outs = [], []
    for a, b, _ in cases:  # back to back: no host collective between the calls
        outs.append(scope["my_ag_gemm"](a, b))
        used.append(current().heap.used_bytes)
    for call, ((_, _, ref), out) in enumerate(zip(cases, outs, strict=True)):
        _close(f"call {call}", out, ref, torch.float32)
    # the shards take turns over two buffers: a call allocates nothing after the second
    assert used[1:] == [used[1]] * (calls - 1), f"heap bytes used after each call: {used}"
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_tp_gemm_docs_example(world_size, backend):
    code = _example()
    assert "def my_ag_gemm(a, b):" in code
    assert ditron.launch(_example_case, world_size, code, 37, 48, 40, 4,
                         backend=backend) == [4] * world_size


def _mismatched_case(code: str) -> str:
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)
    w = ditron.world()
    a = torch.randn(4 + w.rank, 16).to(w.device)  # rank 1 passes one row more
    try:
        scope["my_ag_gemm"](a, torch.randn(16, 8).to(w.device))
    except ValueError as exc:
        return str(exc)
    return "returned"


def test_tp_gemm_docs_example_refuses_mismatched_shapes(backend):
    """The example's ``agree``: ranks calling with different shapes raise ``ValueError`` on
    every rank, naming the shapes, before any rank waits for rows."""
    got = ditron.launch(_mismatched_case, 2, _example(), backend=backend)
    assert all("my_ag_gemm" in msg and "(4, 16)" in msg and "(5, 16)" in msg
               for msg in got), got
