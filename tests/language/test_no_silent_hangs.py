"""No silent hangs: waits that cannot complete name what they waited for, and leave no stale
state behind; the primitives refuse bad ordering arguments when compiled."""

from __future__ import annotations

import time

import pytest
import torch
import triton
import triton.language as tl

import ditron
import ditron.language as dl

from .kernels import wait_block


def _error_chain(exc: BaseException | None) -> list[str]:
    chain = []
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return chain


def _block_wait_names_short_signal() -> tuple[int, str, int, int]:
    pad = ditron.signal_pad("test.block_short", 4)
    out = torch.zeros(1, dtype=torch.int64, device=ditron.world().device)
    pad.signals[:] = torch.tensor([9, 3, 0, 7])
    ditron.set_wait_timeout(0.3)
    with pytest.raises(ditron.WaitTimeoutError) as info:
        wait_block[(1,)](pad.signals, 5, 4, out, 4, ditron.context())
        ditron.check_waits()
    exc = info.value
    return exc.rank, exc.signal, exc.expected, exc.seen


def test_block_wait_timeout_reports_the_named_signals_value(backend):
    """The record names the lowest-addressed short signal (slot 1, holding 3) and the value
    seen in it; it once paired that name with the block's least value (0, from slot 2)."""
    assert ditron.launch(_block_wait_names_short_signal, 1, backend=backend) == [
        (0, "signals:test.block_short[1]", 5, 3)]


def _barrier_after_timeout() -> list[str]:
    """Rank 0 enters a barrier nobody else enters and catches the timeout; only then do the
    others start, and every rank makes the same two barriers: all must meet."""
    w = ditron.world()
    go = ditron.zeros((1,), torch.int64, name="test.go")
    ditron.barrier()
    ditron.set_wait_timeout(0.5)
    log = []
    if w.rank == 0:
        with pytest.raises(ditron.WaitTimeoutError, match=r"signals:barrier\[1\]"):
            ditron.barrier()
        log.append("timed out")
        for peer in range(1, w.world_size):
            ditron.peer(go, peer)[0] = 1
    else:
        deadline = time.monotonic() + 120
        while int(go[0]) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    ditron.set_wait_timeout(20)
    for _ in range(2):
        ditron.barrier()
        log.append("met")
    return log


@pytest.mark.parametrize("world_size", [2, 3])
def test_barrier_after_caught_timeout_stays_in_step(backend, world_size):
    """A barrier that timed out does not count: the rank's next barrier meets the peers'
    next one. It once used up an epoch, so every later barrier of that rank timed out."""
    results = ditron.launch(_barrier_after_timeout, world_size, backend=backend)
    assert results == [["timed out", "met", "met"]] + [["met", "met"]] * (world_size - 1)


@triton.jit
def _atomic_with(cells, ctx, OP: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr):
    if OP == "add":
        dl.atomic_add(cells, 1, ctx.rank, ctx, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        dl.atomic_xchg(cells, 1, ctx.rank, ctx, sem=SEM, scope=SCOPE)
    elif OP == "max":
        dl.atomic_max(cells, 1, ctx.rank, ctx, sem=SEM, scope=SCOPE)
    else:
        dl.atomic_cas(cells, 0, 1, ctx.rank, ctx, sem=SEM, scope=SCOPE)


def _bad_orderings() -> list[int]:
    cells = ditron.zeros((1,), torch.int64, name="test.cells")
    for op in ("add", "xchg", "max", "cas"):
        _atomic_with[(1,)](cells, ditron.context(), op, "relaxed", "cta")  # valid
        # Triton itself runs None and "" as acq_rel / gpu scope, and calls a bad scope a
        # "memory semantic"
        for sem, scope, what in (("bogus", "sys", "sem"), ("", "sys", "sem"),
                                 (None, "sys", "sem"), ("acq_rel", "bogus", "scope"),
                                 ("acq_rel", "", "scope"), ("acq_rel", None, "scope")):
            with pytest.raises(Exception) as info:
                _atomic_with[(1,)](cells, ditron.context(), op, sem, scope)
            chain = _error_chain(info.value)
            assert any(f"ditron.language atomics: {what} must be" in m for m in chain), chain
    return cells.tolist()


def test_atomics_refuse_bad_sem_and_scope(backend):
    assert ditron.launch(_bad_orderings, 1, backend=backend) == [[1]]


@triton.jit
def _wait_on_block(sig, ctx, BLOCK: tl.constexpr):
    dl.wait(sig + tl.arange(0, BLOCK), 1, ctx)


@triton.jit
def _wait_all_on_one(sig, ctx):
    dl.wait_all(sig, 1, ctx)


def _misshapen_waits() -> bool:
    pad = ditron.signal_pad("test.misshapen", 4)
    pad.signals.fill_(1)  # satisfied: only the shape is wrong
    for kernel, args, message in (
            (_wait_on_block, (4,), "dl.wait: sig_ptr and value must be scalars"),
            (_wait_all_on_one, (), "dl.wait_all: sig_ptrs must be a block of pointers")):
        with pytest.raises(Exception) as info:
            kernel[(1,)](pad.signals, ditron.context(), *args)
        chain = _error_chain(info.value)
        assert any(message in m for m in chain), chain
    return True


def test_waits_refuse_the_wrong_shape(backend):
    """``dl.wait`` on a block of signals once spun forever on the CPU backend, whatever the
    timeout (even with every signal set); ``dl.wait_all`` on one failed with a bare
    "axis 0 out of bounds"."""
    assert ditron.launch(_misshapen_waits, 1, backend=backend) == [True]


@triton.jit(do_not_specialize=["epoch"])
def _signal_ring(sig, epoch, ctx, OP: tl.constexpr):
    right = (ctx.rank + 1) % ctx.world_size
    if OP == "notify":
        dl.notify(sig, epoch, right, ctx)
    elif OP == "wait":
        dl.wait(sig, epoch, ctx)
    else:
        dl.wait_all(sig + tl.arange(0, 2), epoch, ctx)


def _signals_of_other_dtypes() -> list[int]:
    """A signal is an int64 word: an int32 one took epochs up to 2**31 and then wrapped,
    so every later wait timed out (CUDA: hung); a float32 one failed inside the
    interpreter. Both are refused when the kernel is compiled, naming the primitive."""
    good = ditron.zeros((2,), torch.int64)
    for dtype in (torch.int32, torch.float32, torch.uint64):
        sig = ditron.zeros((2,), dtype)
        for op in ("notify", "wait", "wait_all"):
            with pytest.raises(Exception) as info:
                _signal_ring[(1,)](sig, 2**31 + 1, ditron.context(), op)
            chain = _error_chain(info.value)
            want = f"dl.{op}: sig_ptr{'s' if op == 'wait_all' else ''} must point to int64"
            assert any(want in m for m in chain), (dtype, op, chain)
    ditron.barrier()
    _signal_ring[(1,)](good, 2**31 + 1, ditron.context(), "notify")
    good[1] = 2**31 + 1
    _signal_ring[(1,)](good, 2**31 + 1, ditron.context(), "wait")
    _signal_ring[(1,)](good, 2**31 + 1, ditron.context(), "wait_all")
    ditron.check_waits()
    ditron.barrier()
    return good.tolist()


@pytest.mark.parametrize("world_size", [1, 2])
def test_signals_must_be_int64(backend, world_size):
    assert ditron.launch(_signals_of_other_dtypes, world_size, backend=backend) == [
        [2**31 + 1] * 2] * world_size


def _block_wait_on_no_lane() -> int:
    """A block wait with every lane masked off waits for nothing, even with no timeout
    and signals that never come, and returns 2**63 - 1 (the least of no value)."""
    pad = ditron.signal_pad("test.block_none", 4)
    out = torch.zeros(1, dtype=torch.int64, device=ditron.world().device)
    ditron.set_wait_timeout(0)
    wait_block[(1,)](pad.signals, 5, 0, out, 4, ditron.context())
    ditron.check_waits()
    return int(out.item())


def test_block_wait_on_no_lane_returns_at_once(backend):
    assert ditron.launch(_block_wait_on_no_lane, 1, backend=backend) == [2**63 - 1]


def _wait_on_a_plain_tensor() -> list[str]:
    from .kernels import wait_forever

    ditron.set_wait_timeout(0.3)
    names = []
    for sig in (torch.zeros(2, dtype=torch.int64, device=ditron.world().device),
                ditron.zeros((8,), torch.int64, name="test.sig")[5:]):  # waits on sig + 1
        with pytest.raises(ditron.WaitTimeoutError) as info:
            wait_forever[(1,)](sig, 1, ditron.context())
            ditron.check_waits()
        names.append(info.value.signal)
    return names


def test_a_wait_outside_the_heap_is_named_so():
    """A timed-out wait on a plain local tensor says its address is outside the symmetric
    heap (it once gave a bare negative "heap offset"); one on a buffer is named by it."""
    [(outside, inside)] = ditron.launch(_wait_on_a_plain_tensor, 1, backend="cpu")
    assert outside.startswith("an address outside the symmetric heap (heap offset "), outside
    assert inside == "test.sig[6]", inside
