"""The consumer prologue (``WAIT``) of the persistent GEMM on its own, one rank.

Row ``r`` belongs to chunk ``(r + 1) // 3``: 70 chunks, so row blocks straddle up to six
chunks, one straddles chunks 63 and 64 (the edge of a program's bit set of seen chunks),
and chunks past 63 are polled one by one. Each case runs on the pointer and the TMA load
paths.
"""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.kernels.gemm import GemmConfig, GemmHooks, launch_gemm, slot_waits
from ditron.kernels.swizzle import linear_order

CFG = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=4, num_warps=1, num_stages=1,
                 programs=1)
M, N, K = 209, 40, 24
CHUNKS = 70


def _chunk_tables(device):
    blocks = -(-M // CFG.block_m)
    first = torch.arange(blocks) * CFG.block_m
    last = torch.clamp(first + CFG.block_m - 1, max=M - 1)
    lo = ((first + 1) // 3).to(torch.int32).to(device)
    hi = ((last + 1) // 3).to(torch.int32).to(device)
    assert int(hi[-1]) == CHUNKS - 1 and bool(((lo <= 63) & (hi >= 64)).any())
    return lo, hi


def _consumer(a, b, sig, target, use_tma):
    lo, hi = _chunk_tables(a.device)
    n_blocks = -(-N // CFG.block_n)
    order = linear_order(len(lo), n_blocks, CFG.group_m).to(a.device)
    c = torch.full((M, N), float("nan"), dtype=a.dtype, device=a.device)
    hooks = GemmHooks(waits=slot_waits(order, lo, hi, n_blocks), wait_sig=sig,
                      wait_target=target)
    launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=CFG, hooks=hooks,
                ctx=ditron.context(), use_tma=use_tma)
    ditron.check_waits()
    return c


def _arrived_chunks_pass(use_tma):
    dev = ditron.world().device
    pad = ditron.signal_pad("test.gemm_chunks", CHUNKS)
    g = torch.Generator().manual_seed(3)
    for target in (1, 2):  # a second call, one epoch later, over the same signals
        a = torch.randn(M, K, generator=g).to(dev)
        b = torch.randn(N, K, generator=g).to(dev).t()
        pad.signals.fill_(target)
        c = _consumer(a, b, pad.signals, target, use_tma)
        torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-4)
    return True


@pytest.mark.parametrize("use_tma", [False, True])
def test_consumer_gemm_with_every_chunk_arrived(backend, use_tma):
    assert ditron.launch(_arrived_chunks_pass, 1, use_tma, backend=backend) == [True]


def _short_chunk_times_out(short, use_tma):
    dev = ditron.world().device
    pad = ditron.signal_pad("test.gemm_short", CHUNKS)
    a = torch.randn(M, K, device=dev)
    b = torch.randn(K, N, device=dev)
    pad.signals.fill_(4)
    pad.signals[short] = 3  # one chunk of an earlier epoch: its rows have not arrived
    ditron.set_wait_timeout(0.3)
    with pytest.raises(ditron.WaitTimeoutError,
                       match=rf"signals:test.gemm_short\[{short}\].*expected >= 4, saw 3"):
        _consumer(a, b, pad.signals, 4, use_tma)
    return True


@pytest.mark.parametrize("short", [5, 63, 66])
def test_consumer_gemm_names_the_chunk_that_never_arrives(backend, short):
    """The program reads every chunk signal at once when it meets an unseen chunk; the one
    still short must not count as seen, so the wait on it times out and names it."""
    use_tma = short == 63
    assert ditron.launch(_short_chunk_times_out, 1, short, use_tma, backend=backend) == [True]


def test_bad_wait_tables_raise_before_the_kernel():
    a, b = torch.randn(M, K), torch.randn(K, N)
    lo, hi = _chunk_tables(a.device)
    n_blocks = -(-N // CFG.block_n)
    order = linear_order(len(lo), n_blocks, CFG.group_m)
    waits = slot_waits(order, lo, hi, n_blocks)
    assert waits[0].item() == int(lo[order[0] // n_blocks]) | int(hi[order[0] // n_blocks]) << 32
    sig = torch.zeros(CHUNKS, dtype=torch.int64)
    c = torch.full((M, N), float("nan"))
    bad = {"go together": GemmHooks(waits=waits),
           "one per slot": GemmHooks(waits=waits[1:], wait_sig=sig),
           "must be int64": GemmHooks(waits=waits.int(), wait_sig=sig)}
    for message, hooks in bad.items():
        with pytest.raises(ValueError, match=message):
            launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=CFG, hooks=hooks)
    assert c.isnan().all()
    with pytest.raises(ValueError, match="chunk ids"):
        slot_waits(order, lo - 1, hi, n_blocks)
    # an upper end past int32 used to wrap to a negative one, which the kernel takes for
    # "no wait": its tiles read chunks that had not arrived
    for top in (1 << 31, 1 << 32):
        with pytest.raises(ValueError, match="chunk ids"):
            slot_waits(order, lo, hi.long() + top, n_blocks)
    none = slot_waits(order, lo, torch.full_like(hi, -1), n_blocks)  # hi < lo: no wait
    assert bool(((none >> 32) == -1).all()) and torch.equal(none & 0xFFFFFFFF,
                                                            lo.long()[order.long() // n_blocks])
