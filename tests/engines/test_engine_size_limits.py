"""The SM and TMA engines at CUDA's launch limits and at 2**31 elements.

The SM engine's transfers are ``grid.y`` of its launch, which CUDA caps at 65535 (a batch
of more launched nothing and failed with "invalid argument", after earlier groups of the
batch had moved); it now launches such a batch in pieces. The TMA engine's element loops
count in int64.
"""

from __future__ import annotations

import textwrap

import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine, sm
from ditron.engines.sync import wait_one
from ditron.runtime.grid_math import GRID_YZ_MAX

from ..cuda_script import run_as_cuda


class _Grids:
    """Stands in for the SM engine's kernel: records each launch's grid and how many
    descriptor rows and counters it was given, launches nothing."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple[int, int], int, int]] = []

    def __getitem__(self, grid):
        def launch(desc, typed, sig_typed, counters, *args, **kwargs):
            self.launches.append((grid, desc.numel(), counters.numel()))
        return launch


def check_many_transfers(count: int) -> list:
    """The grids of one batch of ``count`` one-element local transfers (not moved)."""
    me = ditron.world().rank
    src, dst = torch.zeros(count), torch.zeros(count)
    engine = get_engine("sm", programs=2)
    kernel, sm._FAST_MOVE = sm._FAST_MOVE, _Grids()
    try:
        engine.issue([Transfer(src[i:i + 1], dst[i:i + 1], me, me) for i in range(count)])
        return sm._FAST_MOVE.launches
    finally:
        sm._FAST_MOVE = kernel


def test_sm_engine_batches_past_grid_y_limit():
    # before: one launch of grid (2, 65540): CUDA refuses grid.y > 65535
    count = GRID_YZ_MAX + 5
    launches = ditron.launch(check_many_transfers, 1, count)[0]
    assert [grid for grid, _, _ in launches] == [(2, GRID_YZ_MAX), (2, 5)]
    # each piece is given the table from its first transfer on (7 int64 fields a row)
    assert [(rows, counters) for _, rows, counters in launches] == [
        (7 * count, count), (7 * 5, 5)]


def check_pieces(seed: int) -> list[bool]:
    """A batch of 7 signalled pushes to the next rank, launched 3 transfers at a time."""
    w = ditron.world()
    me, right = w.rank, (w.rank + 1) % w.world_size
    g = torch.Generator().manual_seed(seed + me)
    data = torch.randn(7, 300, generator=g).to(w.device)  # the sm engine reads raw addresses
    inbox = ditron.zeros((7, 300), torch.float32)
    pad = ditron.signal_pad("test_sm_pieces", 7)
    epoch = pad.next_epoch()
    ditron.barrier()
    limit, sm.GRID_YZ_MAX = sm.GRID_YZ_MAX, 3
    try:
        engine = get_engine("sm", programs=2, block=64)
        engine.issue([Transfer(data[i], inbox[i], me, right, Signal(pad, i, epoch))
                      for i in range(7)])
        engine.drain()
    finally:
        sm.GRID_YZ_MAX = limit
    for i in range(7):  # every transfer's signal rose
        wait_one(pad, i, epoch)
    left = (me - 1) % w.world_size
    want = torch.randn(7, 300, generator=torch.Generator().manual_seed(seed + left)).to(w.device)
    got = [torch.equal(inbox[i], want[i]) for i in range(7)]
    ditron.barrier()
    return got


def test_sm_engine_pieces_move_and_signal(backend):
    seed = int(torch.randint(0, 2**20, (1,)))
    assert ditron.launch(check_pieces, 2, seed, backend=backend) == [[True] * 7] * 2



_TMA_LOOPS = textwrap.dedent("""
    import json, re, sys
    sys.path.insert(0, sys.argv[1] + "/tools")
    import cuda_compile_check as check  # switches the backend off the interpreter
    from triton.runtime import driver
    driver.set_active(check._Hopper())
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    from ditron.engines import tma
    from ditron.language.context import DeviceContext

    ctx = DeviceContext(torch.zeros(2, dtype=torch.int64), 0, 2,
                        torch.zeros(8, dtype=torch.int64), 0)
    src, dst = torch.empty(4096, dtype=torch.uint8), torch.empty(4096, dtype=torch.uint8)
    cnt = torch.zeros(1, dtype=torch.int64)
    loops = {}
    for use_tma in (True, False):
        descs = [TensorDescriptor(t[:3840].view(15, 256), [15, 256], [256, 1], [8, 256])
                 for t in (src, dst)] if use_tma else [src, dst]
        k = tma._tma_copy_kernel.warmup(
            *descs, src, dst, 15, 3850, cnt, cnt, 1, 0, ctx, C=256, BLOCK_R=8, STAGES=2,
            TAIL_BLOCK=1024, USE_TMA=use_tma, SIGNAL=False, GPU=True, grid=(1,), num_warps=4)
        loops[str(use_tma)] = re.findall(r"scf\\.for .*? : (i\\d+)", k.asm["ttir"])
    print(json.dumps(loops))
""")


def test_tma_engine_element_loops_are_64_bit(tmp_path):
    """The TMA engine's element-wise copies (the tail after the boxes; every element where
    the addresses rule TMA out) count offsets in int64. Before, the tail started at
    ``rows * C`` in int32, which wrapped for transfers of 2**31 elements or more (a bf16
    transfer of 4 GB copied from 2**31 elements before both tensors), and both loops
    stepped past 2**31 - 1 within 1024 elements or ``programs`` blocks of it, wrapped to
    negative offsets that ``offs < n`` let through. Such transfers take minutes in the
    interpreter, so the kernel is compiled for sm_90 (``tools/cuda_compile_check.py``'s
    stand-in driver) with an ``n`` that fits int32, and its loops' counters read from the
    Triton IR: the boxes' loop is int32 (TMA coordinates), the element loops int64."""
    loops = run_as_cuda(_TMA_LOOPS, file=tmp_path / "tma_loops.py")
    assert loops == {"True": ["i32", "i64"], "False": ["i64"]}
