"""The fused collective kernels (``kernels/fused_collective.py``) as the ops run them: which
variant a launch takes (push or pull, block, programs, warps), its cached symmetric
workspace, and a call cut into launches of at most ``FUSED_MAX_ELEMENTS`` input elements
(``FUSED_RS_MAX_ELEMENTS`` for a reduce-scatter; half as many of 8 bytes).

A fused launch keeps its epochs on the device, so :func:`run` is CUDA-graph safe once the
workspace exists (the first call of a size allocates it, collectively).
"""

from __future__ import annotations

import dataclasses

import torch

from ..kernels import fused_collective as kfc
from ..runtime.config import SettingsError, env_int, env_switch
from ..runtime.diagnostics import check_waits
from ..runtime.world import current
from .graphs import capturing
from .workspaces import cached, follow_previous_use

#: a fused launch moves at most this many input elements of up to 4 bytes (8-byte
#: elements: half as many); larger inputs run as pieces, one launch each
FUSED_MAX_ELEMENTS = 1 << 24
#: the same for the reduce-scatter: a 64-128 MB bf16 reduce-scatter in one launch instead
#: of 2-4 ran 1.2-1.4x faster eagerly and as fast or faster under graphs (2 H200s,
#: docs/perf.md, session 20; the other modes were not measured with larger launches)
FUSED_RS_MAX_ELEMENTS = 1 << 26


#: a block of a fused launch holds at most this many bytes: one of 32768 8-byte elements
#: (the wide reduce-scatter's) took 2.4x the time of 16384 at 64 MB, 6x at 16 MB (one
#: H200, one rank, docs/perf.md, session 40); 16- and 32-bit types stay below it
MAX_BLOCK_BYTES = 128 << 10
#: fused collectives at or above this many input bytes use the push variant
PUSH_MIN_BYTES = 512 << 10
#: launches of at least this many bytes move 16384-element blocks with 16 warps per
#: program (all-gather by pulls, reduce-scatter and all-to-all by pushes) when every rank
#: has a GPU of its own: on 2 H200s, 64 MB-1 GB all-gathers 1.18-1.20x and reduce-scatters
#: 1.11-1.12x faster than 4096-element pushes (``bench/fused_lab.py``, session 6); the
#: reduce-scatter takes ``WIDE_RS_BLOCK`` elements. Ranks that share a GPU keep the narrower
#: programs: every rank's programs must fit on it at once.
WIDE_MIN_BYTES = 32 << 20
#: the wide reduce-scatter's block: 128.9 against 137.7 us (16384) for 64 MB under CUDA
#: graphs on 2 H200s (``bench/fused_lab.py``, session 8)
WIDE_RS_BLOCK = 32768
#: programs per SM of the wide all-gather (by pulls): more programs than SMs, so that one
#: program's publishing overlaps another's pulls (2 H200s, 64-128 MB: 528 programs against
#: 128 1.05-1.33x faster eagerly, 1.01-1.04x under graphs; docs/perf.md, session 20)
WIDE_AG_PROGRAMS_PER_SM = 4


@dataclasses.dataclass(frozen=True)
class FusedVariant:
    """How one fused launch runs: ``push`` or pull, ``block`` elements per program step,
    ``programs`` (0: one block each, up to 128) and ``num_warps`` per program."""

    push: bool
    block: int
    num_warps: int
    programs: int = 0


def fused_variant(nbytes: int, backend: str, mode: int = kfc.ALL_REDUCE,
                  shared_gpu: bool = False, sms: int = 0, itemsize: int = 2) -> FusedVariant:
    """The variant of ``mode`` for a launch of ``nbytes`` input bytes of ``itemsize``-byte
    elements on a device of ``sms`` SMs (0: unknown). Environment overrides, for
    experiments: ``DITRON_FUSED_PUSH=0/1`` (pull / push), ``DITRON_FUSED_BLOCK``,
    ``DITRON_FUSED_PROGRAMS``, ``DITRON_FUSED_WARPS`` (block and warps powers of two:
    ``SettingsError`` otherwise, before any workspace or kernel)."""
    if backend == "cpu":  # the interpreter: pull and one block size unless forced
        return FusedVariant(env_switch("DITRON_FUSED_PUSH") or False,
                            _env_power_of_two("DITRON_FUSED_BLOCK") or 1024, 1)
    wide = (nbytes >= WIDE_MIN_BYTES and not shared_gpu
            and mode in (kfc.ALL_GATHER, kfc.REDUCE_SCATTER, kfc.ALL_TO_ALL))
    push = env_switch("DITRON_FUSED_PUSH")
    if push is None:
        push = mode != kfc.ALL_GATHER if wide else nbytes >= PUSH_MIN_BYTES
    block = _env_power_of_two("DITRON_FUSED_BLOCK") or min(
        (WIDE_RS_BLOCK if mode == kfc.REDUCE_SCATTER else 16384) if wide
        else 4096 if nbytes >= (4 << 20) else 2048 if nbytes >= (1 << 20) else 1024,
        MAX_BLOCK_BYTES // itemsize)
    warps = _env_power_of_two("DITRON_FUSED_WARPS") or (
        16 if wide and block >= 16384 else 4 if block <= 1024 else 8)
    programs = env_int("DITRON_FUSED_PROGRAMS", 0) or (
        WIDE_AG_PROGRAMS_PER_SM * sms if wide and mode == kfc.ALL_GATHER and not push else 0)
    return FusedVariant(push, block, warps, programs)


def _env_power_of_two(name: str) -> int:
    """The override ``name`` (0: unset): a power of two, as Triton's block sizes
    (``tl.arange``) and ``num_warps`` must be, else ``SettingsError`` naming it (the kernel
    would fail later, on every rank, with an error that does not)."""
    value = env_int(name, 0)
    if value & (value - 1):
        raise SettingsError(f"{name} must be a power of two, got {value}")
    return value


def _max_elements(mode: int, itemsize: int) -> int:
    """Input elements of ``itemsize`` bytes in one fused launch of ``mode`` at most (the
    workspaces of 8-byte types hold no more bytes than fp32's)."""
    most = FUSED_RS_MAX_ELEMENTS if mode == kfc.REDUCE_SCATTER else FUSED_MAX_ELEMENTS
    return most * 4 // max(4, itemsize)


_SMS: dict[torch.device, int] = {}


def sm_count(device: torch.device) -> int:
    """The streaming multiprocessors of a CUDA device (cached per device)."""
    sms = _SMS.get(device)
    if sms is None:
        sms = _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return sms


def workspace(dtype: torch.dtype, mode: int, n: int, variant: FusedVariant):
    """The cached fused-collective workspace for ``n`` input elements (collective when new)."""
    rt = current()
    w = rt.world.world_size
    cap = kfc.bucket(n, _max_elements(mode, dtype.itemsize))
    key = ("fused_collective", dtype, mode, cap, variant)
    ws = rt.cache.get(("workspace", *key))
    if ws is not None:
        return ws
    if capturing():
        raise RuntimeError(f"ditron.ops: no fused-collective workspace yet for {n} {dtype} "
                           f"elements; call the op once with this size and dtype before "
                           f"capturing a CUDA graph (workspaces are allocated collectively)")
    return cached(key, lambda: _new_fused_workspace(dtype, mode, cap, w, variant))


@torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
def _new_fused_workspace(dtype: torch.dtype, mode: int, cap: int, w: int,
                         variant: FusedVariant):
    from ..runtime.signals import signal_pad

    rt = current()
    # GPU: one block per program up to 128 programs (latency-bound small sizes finish in one
    # step per program); the CPU interpreter runs programs one by one: two suffice to test
    programs = (2 if rt.world.backend == "cpu"
                else variant.programs or max(1, min(128, cap // variant.block)))
    half, red_offset, slot_len = kfc.workspace_shape(cap, w, mode, variant.push)
    name = (f"fused:{str(dtype).removeprefix('torch.')}:{mode}:{cap}:"
            f"{'push' if variant.push else 'pull'}:{variant.block}:{programs}:{variant.num_warps}")
    buf = rt.heap.alloc((2, half), dtype, name=name)
    try:
        pad = signal_pad(name, 2 * programs * w).signals
    except BaseException:
        rt.heap.free(buf)
        raise
    epochs = torch.zeros(programs, dtype=torch.int64, device=rt.world.device)
    return kfc.Workspace(buf, pad, epochs, cap, programs, red_offset, name, variant.push,
                         slot_len)


def run(flat: torch.Tensor, mode: int, out: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Run the fused collective ``mode`` (reducing with ``op``) on ``flat`` into ``out``
    (see ``kernels/fused_collective.py``), in pieces of at most ``FUSED_MAX_ELEMENTS`` input
    elements (``FUSED_RS_MAX_ELEMENTS`` for a reduce-scatter). No host state per call:
    CUDA-graph safe. Eager calls sharing a workspace follow each other in stream order
    (``runtime/stream_order.py``)."""
    rt = current()
    n = flat.numel()
    cpu = rt.world.backend == "cpu"
    piece = min(n, _max_elements(mode, flat.element_size()))
    variant = fused_variant(piece * flat.element_size(), rt.world.backend, mode,
                            rt.backend.shares_devices(rt.world.local_world_size),
                            0 if cpu else sm_count(flat.device), flat.element_size())
    ws = workspace(flat.dtype, mode, n, variant)
    if not cpu:  # the calls on one workspace (its device epochs) follow in stream order
        follow_previous_use(ws.pad_key, flat.device)
    ctx = rt.context()
    block, warps = variant.block, variant.num_warps
    if n <= ws.cap:  # one piece (for segmented modes too: W divides n): no views to cut
        kfc.launch(flat, out, ws, mode, ctx, block, warps, op=op)
    elif mode in (kfc.ALL_REDUCE, kfc.TWO_SHOT):
        for start in range(0, n, ws.cap):
            part = slice(start, min(n, start + ws.cap))
            kfc.launch(flat[part], out[part], ws, mode, ctx, block, warps, op=op)
    elif mode == kfc.ALL_GATHER:  # pieces of x; rank blocks of out stay n apart
        for start in range(0, n, ws.cap):
            kfc.launch(flat[start:min(n, start + ws.cap)], out[start:], ws, mode, ctx, block,
                       warps, stride=n)
    else:  # reduce-scatter, all-to-all: the same columns of every rank's segment per piece
        w = rt.world.world_size
        seg, step = n // w, max(ws.cap // w, 1)
        for start in range(0, seg, step):
            cols = min(step, seg - start)
            dst = out[start:start + cols] if mode == kfc.REDUCE_SCATTER else out[start:]
            kfc.launch(flat[start:], dst, ws, mode, ctx, block, warps, n=n - start, seg=cols,
                       stride=seg, op=op)
    if (rt.wait_timeout > 0 or cpu) and not capturing():
        check_waits()
    return out
