"""Signals: ``notify`` a peer, ``wait`` for a value (``wait_all`` for a block), ``fence``.

A signal is an int64 word in the symmetric heap (see ``ditron.SignalPad``). The protocol:
a producer writes data (plain stores, local or remote), then ``notify``s the consumer's
signal with release semantics at system scope; the consumer ``wait``s on its local signal
with acquire semantics and may then read the data. Signals only grow within a job (epochs),
so a late ``notify`` can never be lost to a reset.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import context as _slots
from .core import SYS, translate

# Diagnostic-record slots as constexprs (kernels may only read constexpr globals).
DIAG_FLAG = tl.constexpr(_slots.DIAG_FLAG)
DIAG_RANK = tl.constexpr(_slots.DIAG_RANK)
DIAG_OFFSET = tl.constexpr(_slots.DIAG_OFFSET)
DIAG_EXPECTED = tl.constexpr(_slots.DIAG_EXPECTED)
DIAG_SEEN = tl.constexpr(_slots.DIAG_SEEN)
DIAG_LIMIT = tl.constexpr(_slots.DIAG_LIMIT)
DIAG_SCRATCH = tl.constexpr(_slots.DIAG_SCRATCH)

SET = tl.constexpr("set")  # see core.ACQ_REL for why defaults are constexpr objects

# How many polls pass between checks of whether another wait of this rank already failed.
_ABORT_CHECK_EVERY = tl.constexpr(64)


@triton.jit
def rank(ctx):
    """This process's rank."""
    return ctx.rank


@triton.jit
def world_size(ctx):
    """The number of ranks."""
    return ctx.world_size


@triton.jit
def notify(sig_ptr, value, peer, ctx, op: tl.constexpr = SET, scope: tl.constexpr = SYS):
    """Raise ``peer``'s copy of the signal ``sig_ptr`` (a scalar int64 heap pointer).

    ``op="set"`` stores ``value``; ``op="add"`` adds it (for counters several producers
    bump). Every earlier store of the calling program, to any rank, happens before the
    signal change as seen by a ``wait`` that observes it: the program first synchronises
    its threads, then one thread performs a release atomic at ``scope``: system (the
    default) for any waiter; ``"gpu"`` is enough, and cheaper, when every waiter runs on the
    calling program's GPU (a kernel notifying itself).
    """
    tl.static_assert(sig_ptr.dtype.element_ty == tl.int64,
                     "dl.notify: sig_ptr must point to int64 signals (a SignalPad's)")
    tl.static_assert(op == "set" or op == "add", "dl.notify: op must be set or add")
    tl.static_assert(scope == "sys" or scope == "gpu", "dl.notify: scope must be sys or gpu")
    tl.debug_barrier()
    remote = translate(sig_ptr, peer, ctx)
    if op == "add":
        tl.atomic_add(remote, value, sem="release", scope=scope)
    else:
        tl.atomic_xchg(remote, value, sem="release", scope=scope)


@triton.jit
def _record_timeout(sig_ptr, value, seen, ctx):
    local_base = tl.load(ctx.heap_bases + ctx.rank).to(tl.uint64)
    _record_offset((sig_ptr.to(tl.uint64, bitcast=True) - local_base).to(tl.int64), value,
                   seen, ctx)


@triton.jit
def _record_offset(offset, value, seen, ctx):
    zero = tl.full((), 0, tl.int64)
    first = tl.atomic_cas(ctx.diag + DIAG_FLAG, zero, zero + 1, sem="acq_rel", scope="sys")
    if first == 0:
        tl.store(ctx.diag + DIAG_RANK, ctx.rank)
        tl.store(ctx.diag + DIAG_OFFSET, offset)
        tl.store(ctx.diag + DIAG_EXPECTED, value)
        tl.store(ctx.diag + DIAG_SEEN, seen)
        tl.store(ctx.diag + DIAG_LIMIT, ctx.spin_limit)


@triton.jit
def wait(sig_ptr, value, ctx):
    """Spin until the local signal ``*sig_ptr >= value``; return the value seen.

    Reads the signal with an acquire atomic at system scope; while it is short, polls with
    plain volatile loads (no read-modify-write traffic at the L2 while many programs spin)
    and, once it is reached, reads it again with the acquire atomic, so data published
    before the matching ``notify`` is visible to the whole program afterwards. With a
    timeout configured (``ctx.spin_limit > 0``) the wait gives up after that many polls, or
    as soon as another wait of this rank has given up, records rank, signal offset,
    expected and seen values and its poll budget in ``ctx.diag`` and returns the short
    value it saw (the kernel goes on: ``seen < value`` tells it); ``ditron.check_waits()``
    then raises ``ditron.WaitTimeoutError`` on the host. A program may only wait for other
    ranks or, on the CPU backend, for programs of the same launch with a lower id.
    """
    tl.static_assert(sig_ptr.dtype.element_ty == tl.int64,
                     "dl.wait: sig_ptr must point to int64 signals (a SignalPad's)")
    seen = tl.atomic_add(sig_ptr, 0, sem="acquire", scope="sys")
    # a block would spin forever on the CPU backend, whatever the timeout
    tl.static_assert(not (seen < value).type.is_block(),
                     "dl.wait: sig_ptr and value must be scalars; use dl.wait_all for a block")
    if seen < value:
        limit = ctx.spin_limit
        polls = 0
        while (seen < value) & ((limit == 0) | (polls < limit)):
            seen = tl.load(sig_ptr, volatile=True)
            polls += 1
            if (limit > 0) & (polls % _ABORT_CHECK_EVERY == 0):
                if tl.atomic_add(ctx.diag + DIAG_FLAG, 0, sem="relaxed", scope="sys") != 0:
                    polls = limit
        if seen < value:
            _record_timeout(sig_ptr, value, seen, ctx)
        else:
            seen = tl.atomic_add(sig_ptr, 0, sem="acquire", scope="sys")
    return seen


@triton.jit
def wait_all(sig_ptrs, value, ctx, mask=None):
    """Spin until every local signal of the block ``sig_ptrs`` (of any shape; ``mask``-ed
    lanes only) is ``>= value`` (a scalar, one target for every lane); return the smallest
    value seen (``2**63 - 1`` when no lane is in ``mask``: nothing to wait for).

    :func:`wait` for many signals at once: each lane reads its own signal (acquire atomic,
    volatile loads while short, the acquire atomic again once reached), all lanes in
    parallel, so the cost is that of the slowest signal, not the sum. Timeout behaviour as
    :func:`wait`: the record names the lowest-addressed signal still short and the value
    seen in it."""
    tl.static_assert(sig_ptrs.type.is_block(),
                     "dl.wait_all: sig_ptrs must be a block of pointers; use dl.wait for one")
    tl.static_assert(sig_ptrs.dtype.element_ty == tl.int64,
                     "dl.wait_all: sig_ptrs must point to int64 signals (a SignalPad's)")
    if mask is None:
        mask = tl.full(sig_ptrs.shape, True, tl.int1)
    big = tl.full(sig_ptrs.shape, 0x7FFFFFFFFFFFFFFF, tl.int64)
    seen = tl.where(mask, tl.atomic_add(sig_ptrs, 0, mask=mask, sem="acquire", scope="sys"),
                    big)
    least = tl.min(seen, axis=None)  # over every axis: a block condition below would be
    # refused by the compiler and taken as true by the interpreter (a wait without end)
    tl.static_assert(not (least < value).type.is_block(),
                     "dl.wait_all: value must be a scalar (one target for every signal)")
    if least < value:
        short = mask & (seen < value)  # the lanes that polled: read again with acquire
        limit = ctx.spin_limit
        polls = 0
        while (least < value) & ((limit == 0) | (polls < limit)):
            seen = tl.where(mask & (seen < value),
                            tl.load(sig_ptrs, mask=mask & (seen < value), volatile=True), seen)
            least = tl.min(seen, axis=None)
            polls += 1
            if (limit > 0) & (polls % _ABORT_CHECK_EVERY == 0):
                if tl.atomic_add(ctx.diag + DIAG_FLAG, 0, sem="relaxed", scope="sys") != 0:
                    polls = limit
        if least < value:  # record the lowest-addressed signal still short, and its value
            local_base = tl.load(ctx.heap_bases + ctx.rank).to(tl.uint64)
            offsets = (sig_ptrs.to(tl.uint64, bitcast=True) - local_base).to(tl.int64)
            still = mask & (seen < value)
            offset = tl.min(tl.where(still, offsets, big), axis=None)
            named = tl.min(tl.where(still & (offsets == offset), seen, big), axis=None)
            _record_offset(offset, value, named, ctx)
        else:
            seen = tl.where(short, tl.atomic_add(sig_ptrs, 0, mask=short, sem="acquire",
                                                 scope="sys"), seen)
            least = tl.min(seen, axis=None)
    tl.debug_barrier()  # every thread's later loads are ordered after the lanes' acquires
    return least


@triton.jit
def fence(ctx):
    """Order the program's earlier memory operations before its later ones.

    Synchronises the program's threads, then performs an acquire-release atomic at system
    scope on a private scratch word. ``notify``/``wait`` already order what they publish;
    use this only for hand-rolled protocols.
    """
    tl.debug_barrier()
    tl.atomic_add(ctx.diag + DIAG_SCRATCH, 0, sem="acq_rel", scope="sys")


@triton.jit
def fence_async_proxy(ON_GPU: tl.constexpr):
    """Order the thread's earlier memory accesses through the generic proxy (plain loads
    and stores, and what its acquires made visible) before its later ones through the async
    proxy (TMA loads of a tensor descriptor). Needed between a ``wait`` for data that
    another program or rank stored and a descriptor load of that data. ``ON_GPU``: the
    CUDA backend; on the CPU backend (no proxies, no inline assembly) it does nothing."""
    if ON_GPU:
        tl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [],
                                  dtype=tl.int32, is_pure=False, pack=1)
