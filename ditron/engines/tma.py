"""TMA engine: bulk tensor copies (Hopper's Tensor Memory Accelerator) on a few programs.

One launch per transfer. The transfer's ``n`` elements are viewed as ``rows = n // C`` rows
of ``C`` elements (512 bytes, at most 256 elements) plus a tail of ``n - rows * C``
elements. The rows move as ``[BLOCK_R, C]`` boxes through two host-side tensor descriptors
(source and destination, either of them a peer's heap seen through ``ditron.peer``: one
address space), program ``p`` taking boxes ``p, p + P, ...``; program 0 also copies the tail
with plain loads and stores. The last program to finish raises the transfer's signal with
``notify`` (release, system scope), as the SM engine does; on the GPU each program first
waits for its bulk stores to complete and fences the async proxy, so the data is visible
before the signal. A transfer whose addresses break the TMA rules (16-byte aligned base)
moves with plain loads and stores in the same kernel.

Where it pays (2 H200s, ``docs/perf.md`` session 23): with few programs it moves several
times what the ``sm`` engine's load/store programs move, so it is the SM engine for moves
that must leave most SMs to a GEMM (AG-GEMM's ``engine="tma"``). With 16 programs and 256
MB each way at once: pushes 306 GB/s against 151, pulls 308 against 58 (a load/store
program waits for each remote load; a TMA program keeps ``stages`` boxes in flight); at 132
programs both move about 300. The collectives use the copy engine or their fused kernels
instead: ``engine="tma"`` there launches once per transfer and is host-bound.

The CPU backend runs it under Triton's interpreter, which emulates descriptors; that checks
the indexing and the protocol, not the speed.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .. import language as dl
from ..runtime.cuda_graphs import capturing
from ..runtime.dtypes import carried, check_moved
from ..runtime.grid_math import next_power_of_2
from ..runtime.integers import check_int
from ..runtime.stream_order import StreamOrder
from ..runtime.world import current
from .base import Engine, Transfer, check_transfer, endpoints, named, register_engine, signal_slot
from .streams import Kept, SideLane, launch_stream

_BOX_BYTES = 512  # one box row: C elements
_BOX_DIM_MAX = 256  # elements per box dimension (a TMA rule)
_SMEM_SPARE = 8 << 10  # shared memory bytes left to the kernel besides its boxes


def _row_elems(t: torch.Tensor) -> int:
    return min(_BOX_BYTES // t.element_size(), _BOX_DIM_MAX)


@triton.jit(do_not_specialize=["value"])
def _tma_copy_kernel(src_desc, dst_desc, src, dst, rows, n, counter, sig_ptr, value, sig_rank,
                     ctx, C: tl.constexpr, BLOCK_R: tl.constexpr, STAGES: tl.constexpr,
                     TAIL_BLOCK: tl.constexpr, USE_TMA: tl.constexpr, SIGNAL: tl.constexpr,
                     GPU: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if USE_TMA:
        for box in tl.range(pid, tl.cdiv(rows, BLOCK_R), nprog, num_stages=STAGES):
            tile = src_desc.load([box * BLOCK_R, 0])
            dst_desc.store([box * BLOCK_R, 0], tile)
        if pid == 0:  # the tail, in int64: rows * C wrapped in int32 from 2**31 elements
            for off in range(tl.cast(rows, tl.int64) * C, n, TAIL_BLOCK):
                offs = off + tl.arange(0, TAIL_BLOCK)
                tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
    else:
        # int64 offsets: the last step of a program passed 2**31 - 1 where ``n`` is just
        # below it, and wrapped to a negative offset that ``offs < n`` let through
        for off in range(pid.to(tl.int64) * TAIL_BLOCK, n, nprog * TAIL_BLOCK):
            offs = off + tl.arange(0, TAIL_BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
    if SIGNAL:
        if GPU and USE_TMA:
            # the bulk stores must have landed, and be ordered (async proxy -> generic proxy)
            # before the release below publishes them
            tl.inline_asm_elementwise(
                "cp.async.bulk.wait_group 0; fence.proxy.async.global; mov.u32 $0, 0;",
                "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        tl.debug_barrier()
        done = tl.atomic_add(counter, 1, sem="acq_rel", scope="sys")
        if done == nprog - 1:
            tl.atomic_xchg(counter, 0, sem="relaxed", scope="sys")
            dl.notify(sig_ptr, value, sig_rank, ctx)


def check_supported(device: torch.device) -> None:
    """Raise ``NotImplementedError`` on a GPU older than Hopper (no TMA); the CPU backend
    emulates it."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 9:
        raise NotImplementedError("the 'tma' engine needs a Hopper (sm_90) or newer GPU; "
                                  "use engine='sm' or 'copy_engine'")


@register_engine
class TmaEngine(Engine):
    """Bulk tensor copies on ``programs`` programs per transfer (``block_rows`` x 512-byte
    boxes), each program keeping up to ``stages`` boxes in flight (fewer where the GPU's
    shared memory per block cannot hold them). ``concurrent`` (CUDA): on a side stream, as
    the ``sm`` engine; without it on the issuing stream, an issue on another stream than
    the previous one first waiting for that one (the launches share one counter)."""

    name = "tma"
    can_reduce = False

    @torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
    def __init__(self, programs: int | None = None, block_rows: int = 128,
                 concurrent: bool = False, stages: int = 3) -> None:
        rt = current()
        if programs is not None:
            programs = check_int(programs, "tma engine: programs", 1)
        block_rows = check_int(block_rows, "tma engine: block_rows", 1, 257)
        if block_rows & (block_rows - 1):
            raise ValueError(f"tma engine: block_rows must be a power of two in [1, 256], "
                             f"got {block_rows}")
        stages = check_int(stages, "tma engine: stages", 1)
        cpu = rt.world.backend == "cpu"
        check_supported(rt.world.device)
        self.programs = programs or (1 if cpu else 16)
        self.block_rows = block_rows
        if not cpu:  # a box is block_rows x 512 bytes; leave room for the compiler's own
            smem = torch.cuda.get_device_properties(rt.world.device).shared_memory_per_block_optin
            stages = max(1, min(stages, (smem - _SMEM_SPARE) // (block_rows * _BOX_BYTES)))
        self.stages = stages
        self._device = rt.world.device
        self._lane = SideLane(rt.world.device, concurrent)
        # programs count themselves out here; the last one resets it, and the launches of
        # one engine follow one stream order (its side stream, or ``_order``), so one
        # counter serves every transfer (:func:`_zeroed_counter`)
        self._counter = _zeroed_counter(rt.world.device, self._lane.side)
        # an issue on another stream than the previous one first waits for it; the first
        # one for the stream that zeroed the counter
        self._order = StreamOrder(rt.world.device) if self._lane.side is None else None
        if self._order is not None:
            self._order.follow()

    def issue(self, transfers: list[Transfer], since: object | None = None) -> None:
        me = current().world.rank
        for i, t in enumerate(transfers):
            try:
                _check(t, me)
            except ValueError as exc:
                raise named(exc, transfers, i) from None
        moves = []  # every peer view before any launch
        for i, t in enumerate(transfers):
            try:
                moves.append(_endpoints(t, me))
            except ValueError as exc:
                raise named(exc, transfers, i) from None
        if self._order is not None:
            self._order.follow()
        # the streams the counter is used on, for when the engine is dropped
        self._counter.used_on(launch_stream(self._lane, self._device), self._lane.side)
        with self._lane.launching(transfers, since):
            for t, (src, dst) in zip(transfers, moves, strict=True):
                self._launch(t, src, dst)

    def mark(self) -> object | None:
        return self._lane.mark()

    def drain(self) -> None:
        self._lane.drain()

    def _launch(self, t: Transfer, src: torch.Tensor, dst: torch.Tensor) -> None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        rt = current()
        me = rt.world.rank
        n = t.src.numel()
        if n == 0 and t.signal is None:
            return
        C = _row_elems(src)
        rows = n // C
        use_tma = rows > 0 and src.data_ptr() % 16 == 0 and dst.data_ptr() % 16 == 0
        if use_tma:
            box = [min(self.block_rows, next_power_of_2(rows)), C]
            src_desc = TensorDescriptor(src.view(-1)[: rows * C].view(rows, C), [rows, C],
                                        [C, 1], box)
            dst_desc = TensorDescriptor(dst.view(-1)[: rows * C].view(rows, C), [rows, C],
                                        [C, 1], box)
            block_r = box[0]
        else:
            src_desc, dst_desc, block_r = src, dst, 1
        counter = self._counter.tensor
        sig_ptr, value, sig_rank = counter, 0, me
        if t.signal is not None:
            sig_ptr = t.signal.pad.signals[t.signal.index:]
            # ints for the kernel (the check takes any integer: a NumPy one failed there)
            value, sig_rank = int(t.signal.value), int(t.dst_rank)
        _tma_copy_kernel[(self.programs,)](
            src_desc, dst_desc, src, dst, rows, n, counter, sig_ptr, value, sig_rank,
            rt.context(), C=C, BLOCK_R=block_r, STAGES=self.stages, TAIL_BLOCK=1024,
            USE_TMA=use_tma, SIGNAL=t.signal is not None, GPU=rt.world.device.type == "cuda",
            num_warps=4)


@torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
def _zeroed_counter(device: torch.device, side: torch.cuda.Stream | None) -> Kept:
    """The engine's counter, 0, zeroed in the order of the launches that use it, without
    blocking the host: on CUDA by a fill on the side stream ``side`` (a concurrent engine:
    a fill on the issuing stream could run after a launch on the side stream that started at
    a mark taken earlier, ``issue(..., since=)``, and count from whatever the memory held),
    else on the current stream, which the engine's first issue follows (its
    ``StreamOrder``). (A synchronous copy, as before, blocked the host until all the work
    queued on the current stream had finished, once per new engine.) ``RuntimeError``
    while a CUDA graph is captured: the fill would run only at its replays."""
    if device.type != "cuda":
        return Kept(torch.tensor([0], dtype=torch.int64))
    if capturing():
        raise RuntimeError("tma engine: make the engine before capturing a CUDA graph (its "
                           "counter is zeroed on the device when it is made)")
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        return Kept(torch.zeros(1, dtype=torch.int64, device=device))


def _check(t: Transfer, rank: int) -> None:
    check_transfer(t, rank, "tma engine", contiguous=True, on_device=True)
    if t.reduce:
        raise ValueError("tma engine: cannot reduce; use the sm engine for reducing transfers")
    check_moved("tma engine", t.src.dtype)


def _endpoints(t: Transfer, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``t``'s tensors as this rank reaches them (the remote side a view of the peer's
    heap; ``ValueError`` where it is not symmetric), as their carrier dtype
    (``runtime/dtypes.py``: moved bit for bit). An empty transfer only raises its signal;
    any valid pointer stands in for its tensors. ``ValueError`` also where the signal's
    pad is not a live symmetric buffer."""
    if t.signal is not None:
        signal_slot(t, "tma engine")
    if t.src.numel() == 0:
        src = dst = t.src.new_empty(1)
    else:
        src, dst = endpoints(t, rank, "tma engine")
    return carried(src), carried(dst)
