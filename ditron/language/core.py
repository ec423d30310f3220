"""Remote memory access: address translation, loads, stores and atomics on a peer's heap.

Every remote access goes through :func:`translate`, the one rule of the symmetric heap:
a buffer sits at the same offset in every rank's heap, so rank ``peer``'s copy of the
object at ``ptr`` (a local heap pointer) is at ``heap_bases[peer] + (ptr - heap_bases[rank])``.

Conventions shared by every function here:

* ``ptr`` is always a pointer (or block of pointers) into the *local* symmetric heap;
  the function translates it to ``peer``'s copy. ``peer == ctx.rank`` is a local access.
* The peer is named, never the own rank (that comes from ``ctx``); argument order is
  ``(ptr, [value], peer, ctx, ...)`` for every function.
* ``sem`` is one of ``"relaxed"``, ``"acquire"``, ``"release"``, ``"acq_rel"`` and ``scope``
  one of ``"cta"``, ``"gpu"``, ``"sys"`` (Triton's own vocabulary; anything else, ``None``
  and ``""`` included, is refused when the kernel is compiled); defaults are ``"acq_rel"``
  and ``"sys"`` because a peer is another device or process.
* Every lane of the program performs its own element; masked-off lanes do nothing.
* Peers must be on the same node (their heap is mapped); crossing nodes is the network
  engines' job.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Defaults of constexpr string parameters must be constexpr objects: Triton's compiler does
# not wrap a plain ``str`` default of a called @jit function.
ACQ_REL = tl.constexpr("acq_rel")
SYS = tl.constexpr("sys")


#: heap bases are multiples of this many bytes (checked when the heap is mapped)
HEAP_BASE_ALIGN = 4096


@triton.jit
def _check_order(sem: tl.constexpr, scope: tl.constexpr):
    # Triton itself lets None and "" through as its defaults (acq_rel, and gpu scope, not
    # ours) and calls a bad scope a "memory semantic".
    tl.static_assert(sem == "relaxed" or sem == "acquire" or sem == "release"
                     or sem == "acq_rel",
                     "ditron.language atomics: sem must be relaxed, acquire, release or acq_rel")
    tl.static_assert(scope == "cta" or scope == "gpu" or scope == "sys",
                     "ditron.language atomics: scope must be cta, gpu or sys")


@triton.jit
def _peer_base(peer, ctx):
    """``heap_bases[peer]`` (one rank or a block), 0 for a peer outside ``[0, world_size)``:
    masked-off lanes may hold any peer (a table loaded without ``other``, rows past the
    end), and reading their base would leave the ``world_size`` entries of the table."""
    return tl.load(ctx.heap_bases + peer, mask=(peer >= 0) & (peer < ctx.world_size), other=0)


@triton.jit
def translate(ptr, peer, ctx):
    """Return ``ptr`` (local heap pointer or block of pointers) moved into ``peer``'s heap
    (``peer``: one rank, or a block of ranks broadcasting against ``ptr``).

    Pointer arithmetic by a whole number of elements whose alignment the compiler is told
    (heap bases are ``HEAP_BASE_ALIGN``-aligned), so a contiguous, aligned block keeps its
    contiguity and alignment and its remote loads and stores vectorize like local ones (a
    round trip through integers would leave them element by element). A block of peers
    keeps the contiguity but not the alignment fact. A peer outside ``[0, world_size)``
    (e.g. in a masked-off lane) reads no base: its pointer is left outside every heap."""
    # bytes per element: bool (i1) elements take a byte each
    elem: tl.constexpr = (ptr.dtype.element_ty.primitive_bitwidth + 7) // 8
    delta = (_peer_base(peer, ctx) - tl.load(ctx.heap_bases + ctx.rank)) // elem
    if delta.type.is_block():  # a block of peers works too, without the alignment fact
        offset = delta
    else:
        offset = tl.multiple_of(delta, 16)
    return ptr + offset


@triton.jit
def translate_each(ptr, peers, ctx):
    """:func:`translate` with one rank per pointer (``peers`` broadcasts against ``ptr``),
    e.g. rows of a tile owned by different ranks. Element-wise addresses: no vectorization."""
    local_base = tl.load(ctx.heap_bases + ctx.rank).to(tl.uint64)
    peer_base = _peer_base(peers, ctx).to(tl.uint64)
    offset = ptr.to(tl.uint64, bitcast=True) - local_base
    return (peer_base + offset).to(ptr.dtype, bitcast=True)


@triton.jit
def load(ptr, peer, ctx, mask=None, other=None):
    """Read ``peer``'s copy of ``ptr`` (plain load: no ordering; pair with ``wait``)."""
    return tl.load(translate(ptr, peer, ctx), mask=mask, other=other)


@triton.jit
def store(ptr, value, peer, ctx, mask=None):
    """Write ``value`` into ``peer``'s copy of ``ptr`` (plain store; publish with ``notify``)."""
    tl.store(translate(ptr, peer, ctx), value, mask=mask)


@triton.jit
def atomic_add(ptr, value, peer, ctx, mask=None, sem: tl.constexpr = ACQ_REL,
               scope: tl.constexpr = SYS):
    """Atomically add ``value`` to ``peer``'s copy of ``ptr``; return the old values."""
    _check_order(sem, scope)
    return tl.atomic_add(translate(ptr, peer, ctx), value, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xchg(ptr, value, peer, ctx, mask=None, sem: tl.constexpr = ACQ_REL,
                scope: tl.constexpr = SYS):
    """Atomically replace ``peer``'s copy of ``ptr`` by ``value``; return the old values."""
    _check_order(sem, scope)
    return tl.atomic_xchg(translate(ptr, peer, ctx), value, mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_cas(ptr, compare, value, peer, ctx, sem: tl.constexpr = ACQ_REL,
               scope: tl.constexpr = SYS):
    """If ``peer``'s copy of ``ptr`` equals ``compare``, set it to ``value``; return the old.

    ``compare`` and ``value`` are converted to the pointee type first (CUDA's compare-and-swap
    needs all three to agree; plain Python ints would otherwise be int32) and, for a block of
    pointers, broadcast to its shape (every lane swaps its own element; there is no mask)."""
    _check_order(sem, scope)
    dtype = ptr.dtype.element_ty
    compare = tl.cast(compare, dtype)
    value = tl.cast(value, dtype)
    if ptr.type.is_block():  # Triton's compare-and-swap does not broadcast them itself
        compare = tl.broadcast_to(compare, ptr.shape)
        value = tl.broadcast_to(value, ptr.shape)
    return tl.atomic_cas(translate(ptr, peer, ctx), compare, value, sem=sem, scope=scope)


@triton.jit
def atomic_max(ptr, value, peer, ctx, mask=None, sem: tl.constexpr = ACQ_REL,
               scope: tl.constexpr = SYS):
    """Atomically raise ``peer``'s copy of ``ptr`` to at least ``value``; return the old."""
    _check_order(sem, scope)
    return tl.atomic_max(translate(ptr, peer, ctx), value, mask=mask, sem=sem, scope=scope)


@triton.jit
def put(dst, src, n, peer, ctx, BLOCK: tl.constexpr):
    """Copy ``n`` contiguous elements from local ``src`` into ``peer``'s copy of ``dst``.

    The calling program moves all ``n`` elements, ``BLOCK`` at a time (plain stores: publish
    with ``notify``). ``dst`` is a local heap pointer, translated to ``peer``."""
    start = 0
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        store(dst + offs, tl.load(src + offs, mask=mask), peer, ctx, mask=mask)
        start += BLOCK


@triton.jit
def get(dst, src, n, peer, ctx, BLOCK: tl.constexpr):
    """Copy ``n`` contiguous elements of ``peer``'s copy of ``src`` into local ``dst``.

    ``src`` is a local heap pointer, translated to ``peer``; plain loads (``wait`` on the
    producer's signal first)."""
    start = 0
    while start < n:
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, load(src + offs, peer, ctx, mask=mask), mask=mask)
        start += BLOCK
