"""The persistent GEMM's host checks and edges (``kernels/gemm.py``): shapes it would read
or write past refused before the launch, rows near 2**31, outputs of any layout and dtype;
the distributed swizzle's orders for world sizes 1-8 (``kernels/swizzle.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import ditron  # noqa: F401  (before anything imports triton: it arranges the interpreter)
from ditron.kernels import gemm, swizzle
from ditron.kernels.gemm import (
    EPI_ALL_REDUCE,
    EPI_REDUCE_SCATTER,
    GemmConfig,
    GemmHooks,
    cached_linear_order,
    gemm_launch,
    launch_gemm,
    matmul,
)
from ditron.plan import deps, templates

CFG = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=1, num_stages=1,
                 programs=1)
M, N, K = 37, 45, 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nan(shape, dtype=torch.float32) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype)


def test_launch_gemm_refuses_shapes_it_would_read_or_write_past():
    """Before, each of these launched: ``c`` too narrow or too short was written past its
    end (into the rest of its buffer here), ``a`` short of ``M`` rows read past its end,
    ``a`` with other K columns than ``b``'s rows gave a wrong product, ``seg_rows = 0``
    tiled 1-row segments (1530 of 1665 outputs never written), mixed dtypes multiplied on
    the CPU and failed to compile on a GPU; all silently."""
    a, b = torch.randn(M, K), torch.randn(K, N)
    order = cached_linear_order(M, N, CFG, a.device)
    big = _nan((2 * M, 2 * N))
    cases = {
        r"c must be \[37, 45\] \(at least 37 rows\), got \(37, 30\)": (a, b, big[:M, :30], M),
        r"c must be \[37, 45\] \(at least 37 rows\), got \(20, 45\)": (a, b, big[:20, :N], M),
        r"a \(10, 20\) has fewer than M = 37 rows": (a[:10], b, big[:M, :N], M),
        r"cannot multiply a \(37, 25\) by b \(20, 45\)": (torch.randn(M, K + 5), b,
                                                          big[:M, :N], M),
        "must share a dtype": (a.half(), b, big[:M, :N], M),
        "must be 2-D": (a, b, big[0, :N], M),
    }
    for message, (a_, b_, c_, m) in cases.items():
        with pytest.raises(ValueError, match=message):
            launch_gemm(a_, b_, c_, m, order=order, seg_rows=m, cfg=CFG)
    with pytest.raises(ValueError, match="seg_rows must be >= 1, got 0"):
        launch_gemm(a, b, big[:M, :N], M, order=order, seg_rows=0, cfg=CFG)
    assert big.isnan().all()
    # the reduce-scatter epilogue stores one segment: [seg_rows, N] is enough
    hooks = GemmHooks(epilogue=EPI_REDUCE_SCATTER, recv=_nan((1, 19, N)),
                      rs_sig=torch.zeros(8, dtype=torch.int64))
    ctx = gemm._local_context(a.device)
    with pytest.raises(ValueError, match=r"c must be \[19, 45\]"):
        gemm_launch(a, b, _nan((18, N)), M, order=order, seg_rows=19, cfg=CFG, hooks=hooks,
                    ctx=ctx)
    assert gemm_launch(a, b, _nan((19, N)), M, order=order, seg_rows=19, cfg=CFG,
                       hooks=hooks, ctx=ctx) is not None


def test_launch_gemm_refuses_an_epilogue_without_its_buffers():
    """Before, a reduce-scatter or all-reduce epilogue without ``recv`` / ``bc`` stored the
    partial tiles into (a peer's) ``c`` and signalled the order tensor; an unknown
    epilogue number ran as a reduce-scatter."""
    a, b, c = torch.randn(M, K), torch.randn(K, N), _nan((M, N))
    order = cached_linear_order(M, N, CFG, a.device)
    sig = torch.zeros(8, dtype=torch.int64)
    cases = {
        "epilogue 1 needs hooks.recv, hooks.rs_sig": GemmHooks(epilogue=EPI_REDUCE_SCATTER),
        "epilogue 2 needs hooks.bc, hooks.bc_sig": GemmHooks(
            epilogue=EPI_ALL_REDUCE, recv=_nan((1, M, N)), rs_sig=sig),
        "hooks.epilogue must be EPI_STORE, EPI_REDUCE_SCATTER or EPI_ALL_REDUCE, got 3":
            GemmHooks(epilogue=3, recv=_nan((1, M, N)), rs_sig=sig),
    }
    for message, hooks in cases.items():
        with pytest.raises(ValueError, match=message):
            launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=CFG, hooks=hooks)
    assert c.isnan().all()


def test_matmul_refuses_an_order_that_misses_tiles():
    """Before, an order of 3 of the 6 tiles left half of the output uninitialized."""
    a, b = torch.randn(M, K), torch.randn(K, N)
    order = cached_linear_order(M, N, CFG, a.device)
    with pytest.raises(ValueError, match="order must list each of the 6 tiles of 16 x 32 "
                                         "once, got 3 ids"):
        matmul(a, b, cfg=CFG, order=order[:3])
    reversed_order = order.flip(0).contiguous()
    torch.testing.assert_close(matmul(a, b, cfg=CFG, order=reversed_order), a @ b)


@pytest.mark.parametrize("c_layout", ["rm", "t", "slice"])
@pytest.mark.parametrize("dtype, c_dtype", [(torch.float32, torch.bfloat16),
                                            (torch.bfloat16, torch.float32),
                                            (torch.float16, torch.float16)])
def test_output_of_any_layout_and_dtype(dtype, c_dtype, c_layout):
    """``c`` transposed or a strided slice, in another dtype than the operands: the fp32
    accumulator is rounded once to ``c``'s dtype; nothing outside ``c`` is written."""
    a, b = torch.randn(M, K).to(dtype), torch.randn(N, K).to(dtype).t()
    store = _nan((N + 2, 2 * M + 2) if c_layout == "t" else (M + 2, 2 * N + 2), c_dtype)
    if c_layout == "t":
        c = store[:N, :M].t()
    elif c_layout == "slice":
        c = store[1:-1, 2::2]
    else:
        c = store[:M, :N]
    launch_gemm(a, b, c, M, order=cached_linear_order(M, N, CFG, a.device), seg_rows=M,
                cfg=CFG)
    torch.testing.assert_close(c, (a.float() @ b.float()).to(c_dtype))
    assert int(store.isnan().sum()) == store.numel() - M * N


def _wide_flag(rows: int, seg_rows: int) -> bool:
    """``WIDE`` of a launch over ``rows`` rows of a ``[rows, 16] @ [16, 1]`` GEMM, its
    operands spanning few elements (meta tensors: nothing is allocated)."""
    a = torch.empty(1, 16, device="meta").expand(rows, 16)
    b = torch.empty(16, 1, device="meta")
    c = torch.empty(rows, 1, device="meta")
    order = torch.zeros(1, dtype=torch.int32, device="meta")
    return gemm_launch(a, b, c, rows, order=order, seg_rows=seg_rows, cfg=CFG)[2]["WIDE"]


def test_rows_that_reach_2_31_take_int64_offsets():
    """A tile's rows ``row0 + i`` wrap in int32 once the tiling reaches row 2**31, though
    no operand spans 2**31 elements (a one-column output). Before, ``WIDE`` stayed off."""
    assert not _wide_flag(2**31 - 2 * CFG.block_m, 2**31 - 2 * CFG.block_m)
    assert _wide_flag(2**31 - 8, 2**31 - 8)  # the last tile's rows reach 2**31 + 7
    assert _wide_flag(2**31 - 64, 2**30 + 3)  # the second segment's last tile passes 2**31


#: the child process: ``[rows, 16] @ [16, 1]`` on a sparse file mapping, one tile per launch
_ROWS = textwrap.dedent("""
    import os, sys
    import torch
    import ditron
    from ditron.kernels.gemm import GemmConfig, launch_gemm

    cfg = GemmConfig(block_m=16, block_n=16, block_k=16, group_m=1, num_warps=1,
                     num_stages=1, programs=1)
    rows = 2**31 - 8
    path = sys.argv[1]
    with open(path, "wb") as f:
        f.truncate(2 * (rows + 64))
    store = torch.from_file(path, shared=True, size=rows + 64, dtype=torch.float16)
    os.unlink(path)
    guard = store[:32].fill_(7.0)
    c = store[32:32 + rows].view(rows, 1)
    a = torch.ones(1, 16, dtype=torch.float16).expand(rows, 16)
    b = torch.ones(16, 1, dtype=torch.float16)
    # the last row block of one segment: rows 2**31 - 16 .. rows - 1
    c[-16:] = float("nan")
    order = torch.tensor([-(-rows // 16) - 1], dtype=torch.int32)
    launch_gemm(a, b, c, rows, order=order, seg_rows=rows, cfg=cfg)
    assert c[-8:].eq(16).all() and c[-16:-8].isnan().all(), c[-16:, 0].tolist()
    # two segments of 2**30 + 3 rows: the last block of the second, rows 2**31 - 13 ..
    seg = 2**30 + 3
    c[-8:] = float("nan")
    block = -(-seg // 16) + (rows - seg - 1) // 16
    launch_gemm(a, b, c, rows, order=torch.tensor([block], dtype=torch.int32),
                seg_rows=seg, cfg=cfg)
    assert c[-5:].eq(16).all() and c[-8:-5].isnan().all(), c[-16:, 0].tolist()
    assert guard.eq(7).all()
    print("ok")
""")


def test_rows_near_2_31_are_stored():
    """Before, ``row0 + BLOCK_M`` wrapped in int32 for the last tile of 2**31 - 8 rows: its
    rows were never stored; with two segments the second's last tile's rows wrapped to
    negative ones, stored before ``c`` (a crash here). Run on a sparse mapping (a few pages
    touched) in a child process, so that a crash fails this test alone."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-c", _ROWS, os.path.join(tmp, "sparse")],
                              env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit {proc.returncode}: {proc.stderr[-2000:]}")


def _runs(order: list[int], seg_of: list[int], n_blocks: int) -> list[int]:
    """The segments of ``order``'s tiles, each run of one segment once."""
    out: list[int] = []
    for t in order:
        s = seg_of[t // n_blocks]
        if not out or out[-1] != s:
            out.append(s)
    return out


@pytest.mark.parametrize("world_size", range(1, 9))
def test_swizzle_orders_for_every_rank(world_size):
    """For every rank of worlds of 1-8, rows per rank that do not divide into row blocks
    (blocks straddling shards) and groups larger than a segment: the gather order visits
    every tile once, each segment in one run, own first, then in the plan's arrival order;
    the scatter order every tile with rows once, each destination in one run, ``rank + 1``
    first and own last. Before, the gather order grouped row blocks across segments: with
    2 blocks per shard and groups of 8, an own tile came after the peers' tiles of 3
    shards."""
    W = world_size
    for m, block_m in ((1, 16), (5, 4), (8, 4), (13, 4), (32, 16)):
        rows = W * m
        plan = templates.all_gather(m, W)
        seg = -(-rows // W)
        mapping = deps.TileMapping(rows, block_m, seg)
        rs = templates.reduce_scatter([max(0, min(seg, rows - r * seg)) for r in range(W)], W)
        owner = deps.consumer_waits(rs, mapping).owner
        live = [o if mapping.rows(mb)[1] > mapping.rows(mb)[0] else -1
                for mb, o in enumerate(owner)]
        for rank in range(W):
            waits = deps.consumer_waits(plan, deps.TileMapping(rows, block_m), rank)
            arrival = plan.arrival_order(rank)
            for n_blocks, group_m in ((1, 1), (3, 2), (2, 8)):
                g = swizzle.gather_order(waits.owner, n_blocks, rank, W, arrival,
                                         group_m).tolist()
                assert sorted(g) == list(range(len(waits.owner) * n_blocks))
                runs = _runs(g, waits.owner, n_blocks)
                assert runs == [s for s in [rank] + arrival if s in runs], runs
                s = swizzle.scatter_order(live, n_blocks, rank, W, group_m).tolist()
                assert sorted(s) == sorted(mb * n_blocks + nb for mb, o in enumerate(live)
                                           if o >= 0 for nb in range(n_blocks))
                runs = _runs(s, live, n_blocks)
                want = [(rank + i) % W for i in range(1, W)] + [rank]
                assert runs == [q for q in want if q in runs], runs
