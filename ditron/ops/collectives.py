"""Collectives on ordinary tensors, built on the inbox exchange (``exchange.py``), except
``all_reduce``, ``all_gather``, ``reduce_scatter`` and ``all_to_all`` with even splits, with
``engine="sm"`` on one node: one fused kernel each (``kernels/fused_collective.py``) whose
epochs live on the device, so they can be captured in a CUDA graph (``"auto"`` picks them
while a graph is being captured; the other paths refuse capture with a clear error).

Every op equals its torch.distributed counterpart (the reducing ones with ``op=``: sum, avg,
max, min) and returns a new tensor (``all_gather`` and ``reduce_scatter``: or fills a given
``out``; eagerly into a fixed ``out`` they replay a CUDA graph of the call,
``replays.py``); inputs are never modified.
Each takes ``engine=`` (``"copy_engine"``, ``"sm"``, ``"network"``, ``"tma"``; default
``"auto"``); ``DITRON_<OP>_ENGINE`` or ``DITRON_ENGINE`` override the default. Peers on
other nodes always go through the network engine.

Dtypes (``runtime/dtypes.py``): the moving ops take any dtype of 1, 2, 4 or 8 bytes, bit
for bit (fp32, bf16, fp16 and fp64 as themselves, the others as views of the widest
integer type the shape allows); the reducing ops take fp32, bf16, fp16, fp64 and the
integer types NCCL sums (max and min also bool).

Checks run before any kernel: tensor type, device, dtype, divisibility, and agreement of
shapes across ranks (a host gather over the gloo group, once per new shape signature and
cached; ``all_to_all`` gathers its split sizes on every call). A rank that refuses its own
arguments while its peers are in that gather joins it with its error, so that they raise
too (``runtime.agreement.refused_together``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch

from ..kernels import fused_collective as kfc
from ..runtime.agreement import agree, checks_every_call, refused_together, share_agreed
from ..runtime.dtypes import carried, check_moved, check_reduced, moved_as, reduction, viewed
from ..runtime.integers import as_int
from ..runtime.tensor_spans import spans_overlap
from ..runtime.world import current
from . import fused_launch, replays
from .chunked_exchanges import gather_by, gather_on_node, push_gather, push_reduce_scatter
from .exchange import Part, engine_instance, exchange, next_turn, reduce_slots, refuse_capture
from .graphs import graph_mode
from .modes import check_writable, public_op
from .raw_pushes import push_gather_direct, usable
from .workspaces import release_workspaces

__all__ = ["all_gather", "all_reduce", "all_to_all", "reduce_scatter", "release_workspaces"]

ENGINES = ("copy_engine", "sm", "network", "tma")
METHODS = ("auto", "one_shot", "two_shot")
#: all_reduce "auto" uses one-shot up to this many bytes, two-shot above (one-shot at every
#: size with two ranks: the same bytes move, with one barrier less)
ONE_SHOT_MAX_BYTES = 256 << 10
#: "auto" on GPU uses the SM engine below this many bytes per peer, the copy engine above
#: (ops without a fused path: all_to_all)
SM_MAX_BYTES = 1 << 20
#: "auto" on GPU, one node: the fused SM kernels for all_reduce at every size and for
#: all_gather / reduce_scatter below this many bytes per peer, the copy engine's chunked
#: exchanges from there. 2 H200s, eager calls (docs/perf.md, session 21): at 48 MB per
#: rank the copy engine's all-gather takes less device time than the fused kernel (182.9
#: against 188.2 us) and was faster back to back in four of five runs; at 32 MB the fused
#: kernel is faster (122.4-122.9 against 132.8-138.0); the reduce-scatter's two are within
#: noise of each other at 48 MB per peer, the fused kernel faster at 32 MB
FUSED_AG_MAX_BYTES = 48 << 20
FUSED_RS_MAX_BYTES = 64 << 20
#: the same for all_to_all with even splits (the reduce-scatter's movement without the sum)
FUSED_A2A_MAX_BYTES = 64 << 20
#: ops with a fused, CUDA-graph-safe path (``engine="sm"``, one node; all_to_all: even
#: splits)
_FUSED_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: ops whose chunked copy-engine exchange (one node) also has a graph-safe variant, which
#: "auto" takes while capturing from ``FUSED_GRAPH_MAX_BYTES`` per peer (or the op's fused
#: limit, if lower)
_CHUNKED_GRAPH_OPS = ("all_gather", "reduce_scatter")
#: under CUDA graphs on 2 H200s the graph-safe copy-engine exchanges beat the fused kernels
#: from 32 MB per peer: all-gather 116 / 160 us against 123 / 187 at 32 / 48 MB per rank,
#: reduce-scatter 123 / 167 against 129 / 193 at 32 / 48 MB per peer (docs/perf.md,
#: session 20; smaller sizes not measured since)
FUSED_GRAPH_MAX_BYTES = 32 << 20


def _fused_limit(op: str) -> float:
    """Bytes per peer from which ``"auto"`` leaves the fused path of ``op`` on one node."""
    return {"all_gather": FUSED_AG_MAX_BYTES, "reduce_scatter": FUSED_RS_MAX_BYTES,
            "all_to_all": FUSED_A2A_MAX_BYTES}.get(op, math.inf)


# -- checks -------------------------------------------------------------------------------------
def _check_tensor(op: str, x: torch.Tensor, reduced: str | None = None) -> None:
    """Type, device and dtype of ``x`` (``reduced``: the reduction the op applies to it,
    which allows fewer dtypes than moving it; ``runtime/dtypes.py``)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"ditron.ops.{op}: expected a torch.Tensor, got {type(x).__name__}")
    device = current().world.device
    if x.device != device:
        raise ValueError(f"ditron.ops.{op}: tensor is on {x.device}, this rank computes on "
                         f"{device}")
    if x.is_quantized or x.layout != torch.strided:
        raise ValueError(f"ditron.ops.{op}: needs a dense, unquantized tensor, got "
                         f"{x.layout} {x.dtype}")
    if reduced is None:
        check_moved(f"ditron.ops.{op}", x.dtype)
    else:
        check_reduced(f"ditron.ops.{op}", reduced, x.dtype)


def _dim(op: str, x: torch.Tensor, dim: int) -> int:
    if x.dim() == 0:
        raise ValueError(f"ditron.ops.{op}: needs a tensor with at least one dimension")
    d = as_int(dim)
    if d is None:
        raise TypeError(f"ditron.ops.{op}: dim must be an int, got {dim!r}")
    if not -x.dim() <= d < x.dim():
        raise ValueError(f"ditron.ops.{op}: dim {d} is out of range for shape "
                         f"{tuple(x.shape)}")
    return d % x.dim()


def _engine(op: str, engine: str | None, nbytes_per_peer: int, fusable: bool = True,
            replay: bool = False) -> str:
    name = _engine_name(op, engine, nbytes_per_peer, fusable, replay)
    engine_instance(name)  # an engine that cannot run here raises now, before any kernel
    return name


def requested_engine(op: str, engine: str | None) -> str:
    """The engine asked for: the argument, else ``DITRON_<OP>_ENGINE``, else
    ``DITRON_ENGINE``, else ``"auto"``. Every rank must ask for the same (checked: engines
    run different protocols); ``"auto"`` picks the same on every rank from what the ranks
    agree on, except where the engines it picks between interoperate (uneven all-to-all
    splits: SM or copy-engine pushes into one exchange)."""
    name = (engine or os.environ.get(f"DITRON_{op.upper()}_ENGINE")
            or os.environ.get("DITRON_ENGINE") or "auto")
    if name != "auto" and name not in ENGINES:
        raise ValueError(f"ditron.ops.{op}: unknown engine {name!r}{_engine_source(op, engine)}; "
                         f"choose 'auto' or one of {', '.join(ENGINES)}")
    return name


def _engine_name(op: str, engine: str | None, nbytes_per_peer: int,
                 fusable: bool = True, replay: bool = False) -> str:
    """The engine for this call: the argument, else ``DITRON_<OP>_ENGINE``, else
    ``DITRON_ENGINE``, else ``"auto"``'s choice (``fusable``: whether this call has a fused
    path, i.e. the op has one and, for all_to_all, the splits are even; ``replay``: the
    call would be a graph replay, so ``"auto"`` chooses by ``REPLAY_FUSED_MAX_BYTES``)."""
    name = requested_engine(op, engine)
    if name == "auto":
        rt = current()
        if rt.world.backend == "cpu":
            return "copy_engine"
        return _auto_engine(op, nbytes_per_peer, fusable and op in _FUSED_OPS, graph_mode(),
                            rt.topo.num_nodes, replay)
    if name not in ENGINES:
        raise ValueError(f"ditron.ops.{op}: unknown engine {name!r}; choose 'auto' or one of "
                         f"{', '.join(ENGINES)}")
    return name


def _engine_source(op: str, engine: str | None) -> str:
    """Where :func:`requested_engine` found a name the caller did not pass: the variable."""
    if engine:
        return ""
    var = f"DITRON_{op.upper()}_ENGINE"
    return f" (from {var if os.environ.get(var) else 'DITRON_ENGINE'})"


def _auto_engine(op: str, nbytes_per_peer: int, fusable: bool, graph: bool,
                 nodes: int, replay: bool = False) -> str:
    """``"auto"``'s engine on GPU for a call of ``op`` moving ``nbytes_per_peer`` bytes per
    peer (``fusable``: it has a fused path; ``graph``: it must be graph-safe; ``replay``:
    it will be a replayed graph, ``ops/replays.py``)."""
    if fusable and graph and (op not in _CHUNKED_GRAPH_OPS or nodes > 1):
        return "sm"  # the graph-safe path
    if fusable and nodes == 1:
        limit = _fused_limit(op)
        if graph:
            limit = min(limit, FUSED_GRAPH_MAX_BYTES)
        elif replay:
            limit = REPLAY_FUSED_MAX_BYTES.get(op, limit)
        return "sm" if nbytes_per_peer < limit else "copy_engine"
    return "sm" if nbytes_per_peer < SM_MAX_BYTES else "copy_engine"


def _copy_out(view: torch.Tensor) -> torch.Tensor:
    out = torch.empty(view.shape, dtype=view.dtype, device=view.device)
    out.copy_(view)
    return out


# -- flat building blocks -------------------------------------------------------------------------
def _gather_flat(key: str, flat: torch.Tensor, engine: str) -> tuple[torch.Tensor, object]:
    """Every rank's ``flat`` ([n], contiguous) stacked: ``[W, n]`` view of the inbox."""
    rt = current()
    w, me, n = rt.world.world_size, rt.world.rank, flat.numel()
    parts = [Part(q, flat, me * n) for q in range(w)]
    call = exchange(key, flat.dtype, w * n, parts, {q: (q * n, n) for q in range(w)}, engine)
    return call.inbox.view(w, n), call


def _reduce_scatter_flat(key: str, chunks: torch.Tensor, engine: str,
                         graph: bool = False, out: torch.Tensor | None = None,
                         op: str = "sum") -> torch.Tensor:
    """``chunks`` [W, c] (contiguous): return the reduction (``op``) over ranks of their
    row ``me``, into ``out`` (``[c]``) when given (``graph``: the graph-safe variant, one
    node, an engine that can wait)."""
    rt = current()
    if rt.topo.num_nodes == 1 and engine != "network":
        return push_reduce_scatter(key + ".chunked", chunks, engine, graph, out=out, op=op)
    w, me = rt.world.world_size, rt.world.rank
    c = chunks.shape[1]
    parts = [Part(q, chunks[q], me * c) for q in range(w)]
    call = exchange(key, chunks.dtype, w * c, parts, {q: (q * c, c) for q in range(w)}, engine)
    out = reduce_slots(call.inbox.view(w, c), out, op)
    call.finish()
    return out


# -- public ops ---------------------------------------------------------------------------------
@public_op
def all_gather(x: torch.Tensor, dim: int = 0, *, engine: str | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (rank order).

    Equivalent: ``torch.cat(parts, dim)`` after ``dist.all_gather(parts, x)``.

    ``out`` (optional): the result's tensor (its shape, dtype and device; it may overlap
    ``x`` only as torch.distributed's in-place form, ``x`` this rank's rows of a contiguous
    ``out`` with ``dim=0``, else ``ValueError``), filled and returned. A symmetric ``out``
    (``ditron.empty``, the same buffer on every rank), contiguous, with ``dim=0``, lets the
    eager copy engine on one node push every rank's part straight into the peers' ``out``:
    no inbox and no copy out of it (:func:`~ditron.ops.raw_pushes.push_gather_direct`).
    Every rank must then pass such an ``out``; ranks that disagree raise ``ValueError``.
    Any other contiguous ``out`` with ``dim=0`` and a contiguous ``x`` of at least
    ``REPLAY_MIN_BYTES`` per peer makes an eager call on one GPU node (copy engine or fused
    kernel) the replay of a CUDA graph of the call (``ops/replays.py``), as for
    ``reduce_scatter``.
    """
    with refused_together("ditron.ops.all_gather"):
        _check_tensor("all_gather", x)
        d = _dim("all_gather", x, dim)
        shape = (*x.shape[:d], current().world.world_size * x.shape[d], *x.shape[d + 1:])
        width = moved_as(x.dtype, tuple(x.shape))  # the call's, the same on every rank
        xc = viewed(x, width)
        into = None
        if out is not None:
            _check_out("all_gather", out, shape, x.dtype, x, d)
            try:
                into = out if out.dtype == width else out.view(width)
            except RuntimeError:  # strides that do not allow the view: gathered, then copied
                into = None
    if out is None:
        return viewed(_all_gather(xc, d, engine, None, x.dtype), x.dtype)
    got = _all_gather(xc, d, engine, into, x.dtype)
    return out if into is not None else _into(out, viewed(got, x.dtype))


def _all_gather(x: torch.Tensor, d: int, engine: str | None, out: torch.Tensor | None,
                dtype: torch.dtype) -> torch.Tensor:
    """:func:`all_gather` of a checked ``x`` of a native dtype (``dtype``: the caller's,
    which the ranks agree on) along dimension ``d``."""
    rt = current()
    w = rt.world.world_size
    nbytes = x.numel() * x.element_size()
    with refused_together("ditron.ops.all_gather"):
        can_replay = _replayable(x, d, out, nbytes) and not _symmetric(out)
        asked = requested_engine("all_gather", engine)  # read once: variables cost ~1.5 us
        eng = _engine("all_gather", asked, nbytes, replay=can_replay)
        direct = _direct_offset(eng, d, out)
        gather_by()
    replay = can_replay and eng in _REPLAYED_ENGINES
    agree("ditron.ops.all_gather", shape=tuple(x.shape), dtype=dtype, dim=d,
          engine=asked, symmetric_out_offset=direct,
          replayed=replay)
    if w == 1:
        return _into(out, x) if out is not None else _copy_out(x)
    xm = (x if d == 0 else x.movedim(d, 0)).contiguous()
    if direct is not None:
        push_gather_direct("all_gather.direct", xm.view(-1), out.view(w, -1))
        return out
    if replay:
        flat, flat_out = x.view(-1), out.view(-1)
        key = ("all_gather", eng, *replays.key_of(x, out))
        if eng == "sm":
            replays.run(key, lambda: fused_launch.run(flat, kfc.ALL_GATHER, flat_out))
        else:
            rows = flat_out.view(w, -1)
            turn = next_turn("all_gather.replay", out.numel() * out.element_size())
            replays.run((*key, turn), lambda: push_gather("all_gather.replay", flat, rows,
                                                          eng, True, turn))
        return out
    flat_out = out.view(-1) if out is not None and d == 0 and out.is_contiguous() else None
    if _fused_ok(eng, xm.numel(), "all_gather"):
        dst = (flat_out if flat_out is not None
               else torch.empty(w * xm.numel(), dtype=x.dtype, device=x.device))
        flat = fused_launch.run(xm.view(-1), kfc.ALL_GATHER, dst)
        result = flat.view(w * xm.shape[0], *xm.shape[1:]).movedim(0, d)
        return _into(out, result) if out is not None else result.contiguous()
    if eng == "copy_engine" and rt.topo.num_nodes == 1:
        rows = (flat_out.view(w, -1) if flat_out is not None else
                torch.empty((w, xm.numel()), dtype=x.dtype, device=x.device))
        gather_on_node("all_gather", xm.view(-1), rows, eng, graph_mode())
        result = rows.view(w * xm.shape[0], *xm.shape[1:]).movedim(0, d)
        return _into(out, result) if out is not None else result.contiguous()
    stacked, call = _gather_flat("all_gather", xm.view(-1), eng)
    result = stacked.view(w * xm.shape[0], *xm.shape[1:]).movedim(0, d)
    result = _into(out, result) if out is not None else _copy_out(result)
    call.finish()
    return result


def _check_out(op: str, out: torch.Tensor, shape: tuple, dtype: torch.dtype,
               x: torch.Tensor, dim: int) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"ditron.ops.{op}: out must be a torch.Tensor, got "
                        f"{type(out).__name__}")
    device = current().world.device
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device:
        raise ValueError(f"ditron.ops.{op}: out is {tuple(out.shape)} {out.dtype} on "
                         f"{out.device}; expected {tuple(shape)} {dtype} on {device}")
    check_writable(op, out)
    _check_overlap(op, out, x, dim)


def _check_overlap(op: str, out: torch.Tensor, x: torch.Tensor, dim: int) -> None:
    """Refuse an ``out`` whose memory overlaps ``x``'s, except torch.distributed's in-place
    forms (contiguous, ``dim`` 0): an all-gather's ``x`` that is this rank's rows of
    ``out``, a reduce-scatter's ``out`` that is this rank's rows of ``x``. Any other overlap
    would be written while the peers or the engines still read ``x``."""
    if not spans_overlap(out, x):
        return
    me = current().world.rank
    if dim == 0 and out.is_contiguous() and x.is_contiguous():
        if op == "all_gather" and x.data_ptr() == (
                out.data_ptr() + me * x.numel() * x.element_size()):
            return
        if op == "reduce_scatter" and out.data_ptr() == (
                x.data_ptr() + me * out.numel() * out.element_size()):
            return
    form = ("x this rank's rows of out" if op == "all_gather"
            else "out this rank's rows of x")
    raise ValueError(f"ditron.ops.{op}: out overlaps x in memory, other than in "
                     f"torch.distributed's in-place form ({form}, dim 0, both contiguous); "
                     f"pass an out of its own")


#: eager all-gathers and reduce-scatters into a given ``out`` replay a CUDA graph of the
#: call (``ops/replays.py``) from this many bytes per peer, with these engines (their
#: graph-safe variants: the copy engine's chunked exchange, the fused kernel). 2 H200s,
#: eagerly back to back, into preallocated outputs (docs/perf.md, session 22): the fused
#: kernel replayed took 25-45 us per call at 2 and 8 MB per peer, not replayed 70-121
REPLAY_MIN_BYTES = 1 << 20
_REPLAYED_ENGINES = ("copy_engine", "sm")
#: replayed calls: ``"auto"`` takes the fused kernel below this many bytes per peer, the
#: copy engine's exchange from there. 2 H200s, eagerly back to back (docs/perf.md, session
#: 22): all-gather fused / copy engine 122.8 / 130.6 us at 32 MB per peer, 187.3 / 172.4
#: at 48 MB; reduce-scatter 68.6 / 78.1 at 16 MB, 130.0 / 124.3 at 32 MB
REPLAY_FUSED_MAX_BYTES = {"all_gather": 48 << 20, "reduce_scatter": 32 << 20}


def _replayable(x: torch.Tensor, dim: int, out: torch.Tensor | None, nbytes: int) -> bool:
    """Whether an eager copy-engine call of ``x`` into ``out`` may be a graph replay
    (``ops/replays.py``): ``replays.ENABLED``, CUDA, one node, not capturing, no wait
    timeout, ``dim`` 0, ``x`` and ``out`` contiguous, ``nbytes`` per peer at least
    ``REPLAY_MIN_BYTES``. Part of the call's signature: every rank must agree."""
    rt = current()
    return (replays.ENABLED and out is not None and dim == 0 and out.is_contiguous()
            and x.is_contiguous() and nbytes >= REPLAY_MIN_BYTES
            and rt.world.device.type == "cuda" and rt.topo.num_nodes == 1
            and rt.wait_timeout <= 0 and not graph_mode())


def _symmetric(out: torch.Tensor | None) -> bool:
    return out is not None and current().heap.contains(out)


def _direct_offset(engine: str, dim: int, out: torch.Tensor | None) -> int | None:
    """The heap offset of ``out`` when this all-gather can push straight into the peers'
    ``out`` (eager raw copy engine on one node, ``dim`` 0, a contiguous symmetric
    ``out``), else ``None``. Part of the call's signature, so every rank must agree."""
    rt = current()
    if (out is None or dim != 0 or not out.is_contiguous() or rt.topo.num_nodes != 1
            or not usable(engine, graph_mode()) or not rt.heap.contains(out)):
        return None
    return rt.heap.offset_of(out)


def _into(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``out``, holding ``result`` (copied unless ``result`` already is ``out``'s view:
    strides may differ in dims of size 1)."""
    if result.data_ptr() == out.data_ptr():
        if all(a == b or n <= 1 for a, b, n in zip(result.stride(), out.stride(), out.shape,
                                                 strict=True)):
            return out
        result = result.clone()  # the same memory in another layout
    out.copy_(result)
    return out


@public_op
def reduce_scatter(x: torch.Tensor, dim: int = 0, *, op: object = "sum",
                   engine: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce ``x`` over ranks (``op``: ``"sum"``, ``"avg"``, ``"max"``, ``"min"`` or the
    ``dist.ReduceOp`` of that name) and keep this rank's ``1/W`` slice along ``dim``.

    Equivalent: ``dist.all_reduce(y := x.clone(), op); y.chunk(W, dim)[rank]`` (what
    ``dist.reduce_scatter_tensor`` computes for ``dim=0``).

    ``out`` (optional): the result's tensor (its shape, dtype and device; it may overlap
    ``x`` only as torch.distributed's in-place form, ``out`` this rank's rows of a
    contiguous ``x`` with ``dim=0``, else ``ValueError``), filled and returned. With a
    contiguous ``out``, ``dim=0``, a contiguous ``x`` and at least ``REPLAY_MIN_BYTES``
    per peer, an eager call on one GPU node (copy engine or fused kernel) runs as the
    replay of a CUDA graph captured on ``x`` and ``out`` (the second call on those
    addresses captures it; ``ops/replays.py``): the graph-safe variant's work (the
    exchange's finer chunks) at the host cost of one launch. Every rank must then pass
    such an ``out``; ranks that disagree raise ``ValueError``.
    """
    rt = current()
    w = rt.world.world_size
    with refused_together("ditron.ops.reduce_scatter"):
        op = reduction("ditron.ops.reduce_scatter", op)
        _check_tensor("reduce_scatter", x, op)
        d = _dim("reduce_scatter", x, dim)
        if x.shape[d] % w:
            raise ValueError(f"ditron.ops.reduce_scatter: size {x.shape[d]} of dim {d} does "
                             f"not divide into {w} ranks")
        shape = (*x.shape[:d], x.shape[d] // w, *x.shape[d + 1:])
        if out is not None:
            _check_out("reduce_scatter", out, shape, x.dtype, x, d)
    if x.dtype == torch.bool:  # max / min of bools (any / all) on their bytes
        got = _reduce_scatter(carried(x), d, op, engine,
                              None if out is None else carried(out), x.dtype)
        return out if out is not None else got.view(torch.bool)
    return _reduce_scatter(x, d, op, engine, out, x.dtype)


def _reduce_scatter(x: torch.Tensor, d: int, op: str, engine: str | None,
                    out: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """:func:`reduce_scatter` of a checked ``x`` of a summed dtype along dimension ``d``
    (``dtype``: the caller's, which the ranks agree on: a ``bool`` call moves as
    ``uint8``, and must not pass for a ``uint8`` one)."""
    rt = current()
    w = rt.world.world_size
    nbytes = x.numel() * x.element_size() // w
    with refused_together("ditron.ops.reduce_scatter"):
        can_replay = _replayable(x, d, out, nbytes)
        asked = requested_engine("reduce_scatter", engine)
        eng = _engine("reduce_scatter", asked, nbytes, replay=can_replay)
    replay = can_replay and eng in _REPLAYED_ENGINES
    agree("ditron.ops.reduce_scatter", shape=tuple(x.shape), dtype=dtype, dim=d, op=op,
          engine=asked, replayed=replay)
    if w == 1:
        return _into(out, x) if out is not None else _copy_out(x)
    if replay:
        parts, flat_out = x.view(w, -1), out.view(-1)
        key = ("reduce_scatter", eng, op, *replays.key_of(x, out))
        if eng == "sm":
            replays.run(key, lambda: fused_launch.run(parts.view(-1), kfc.REDUCE_SCATTER,
                                                      flat_out, op))
        else:
            turn = next_turn("reduce_scatter.replay", x.numel() * x.element_size())
            replays.run((*key, turn), lambda: push_reduce_scatter(
                "reduce_scatter.replay", parts, eng, True, turn, out=flat_out, op=op))
        return out
    xm = (x if d == 0 else x.movedim(d, 0)).contiguous()
    rows = xm.shape[0] // w
    flat_out = out.view(-1) if out is not None and d == 0 and out.is_contiguous() else None
    if _fused_ok(eng, xm.numel(), "reduce_scatter"):
        dst = (flat_out if flat_out is not None
               else torch.empty(xm.numel() // w, dtype=x.dtype, device=x.device))
        mine = fused_launch.run(xm.view(-1), kfc.REDUCE_SCATTER, dst, op)
    else:
        graph = graph_mode() and eng == "copy_engine" and rt.topo.num_nodes == 1
        mine = _reduce_scatter_flat("reduce_scatter", xm.view(w, -1), eng, graph, flat_out,
                                    op)
    result = mine.view(rows, *xm.shape[1:]).movedim(0, d)
    if out is not None:
        return _into(out, result)
    return result if d == 0 else result.contiguous()


@public_op
def all_reduce(x: torch.Tensor, method: str = "auto", *, op: object = "sum",
               engine: str | None = None) -> torch.Tensor:
    """Reduce ``x`` over ranks (``op``: ``"sum"``, ``"avg"``, ``"max"``, ``"min"`` or the
    ``dist.ReduceOp`` of that name); returns a new tensor (``x`` is unchanged).

    ``method``: ``"one_shot"`` (every rank gathers every input and reduces; best for small
    tensors), ``"two_shot"`` (reduce-scatter then all-gather; best for large ones) or
    ``"auto"`` (one-shot up to ``ONE_SHOT_MAX_BYTES``, or at any size with two ranks).
    Equivalent:
    ``y = x.clone(); dist.all_reduce(y, op)``.
    """
    with refused_together("ditron.ops.all_reduce"):
        op = reduction("ditron.ops.all_reduce", op)
        _check_tensor("all_reduce", x, op)
        if method not in METHODS:
            raise ValueError(f"ditron.ops.all_reduce: unknown method {method!r}; choose one "
                             f"of {', '.join(METHODS)}")
    if x.dtype == torch.bool:  # max / min of bools (any / all) on their bytes
        return _all_reduce(carried(x), method, op, engine, x.dtype).view(torch.bool)
    return _all_reduce(x, method, op, engine, x.dtype)


def _all_reduce(x: torch.Tensor, method: str, op: str, engine: str | None,
                dtype: torch.dtype) -> torch.Tensor:
    """:func:`all_reduce` of a checked ``x`` of a summed dtype (``dtype``: the caller's,
    which the ranks agree on: a ``bool`` call moves as ``uint8``, and must not pass for a
    ``uint8`` one)."""
    rt = current()
    w = rt.world.world_size
    nbytes = x.numel() * x.element_size()
    if method == "auto":
        method = "one_shot" if nbytes <= ONE_SHOT_MAX_BYTES or w <= 2 else "two_shot"
    with refused_together("ditron.ops.all_reduce"):
        asked = requested_engine("all_reduce", engine)
        eng = _engine("all_reduce", asked, nbytes if method == "one_shot" else nbytes // w)
        gather_by()  # a bad value refused here, not after the reduce-scatter half
    agree("ditron.ops.all_reduce", shape=tuple(x.shape), dtype=dtype, method=method, op=op,
          engine=asked)
    if w == 1:
        return _copy_out(x)
    if _fused_ok(eng, x.numel(), "all_reduce"):
        flat = x.contiguous().view(-1)
        return fused_launch.run(flat, kfc.MODES[method], torch.empty_like(flat),
                                op).view(x.shape)
    refuse_capture(f"all_reduce with engine {eng!r}")
    flat = x.contiguous().view(-1)
    n = flat.numel()
    if method == "one_shot":
        stacked, call = _gather_flat("all_reduce.one_shot", flat, eng)
        out = reduce_slots(stacked, op=op)
        call.finish()
        return out.view(x.shape)
    c = -(-n // w)
    if c * w != n:
        padded = torch.zeros(c * w, dtype=x.dtype, device=x.device)
        padded[:n].copy_(flat)
        flat = padded
    mine = _reduce_scatter_flat("all_reduce.two_shot.rs", flat.view(w, c), eng, op=op)
    if rt.topo.num_nodes == 1 and engine_instance(eng).can_wait:
        # the reduced slices gathered as the all-gather's are (chunked_exchanges.GATHER_BY)
        rows = torch.empty((w, c), dtype=x.dtype, device=x.device)
        gather_on_node("all_reduce.two_shot", mine, rows, eng)
        return rows.view(-1)[:n].view(x.shape)
    stacked, call = _gather_flat("all_reduce.two_shot.ag", mine, eng)
    out = _copy_out(stacked.reshape(-1)[:n])
    call.finish()
    return out.view(x.shape)


def _fused_ok(engine: str, n: int, op: str) -> bool:
    """Whether ``op`` runs as fused kernels (``kernels/fused_collective.py``): the SM
    engine on one node."""
    return engine == "sm" and current().topo.num_nodes == 1


#: the largest split size: the sizes travel in the int64 rows of the host gather
#: (``runtime/host_rows.py``), which cannot hold a larger one
_MAX_SPLIT = 2**63 - 1


def _splits(op: str, splits: Sequence[int] | None, total: int, w: int, what: str) -> list[int]:
    """``splits`` (``None``: ``total`` rows split evenly) as ``w`` ints in ``[0, 2**63)``;
    ``ValueError`` naming ``what`` for anything else."""
    if splits is None:
        if total % w:
            raise ValueError(f"ditron.ops.{op}: {total} rows do not divide into {w} ranks; "
                             f"pass {what}")
        return [total // w] * w
    if isinstance(splits, torch.Tensor):
        splits = splits.tolist()  # a host synchronisation when it is on a GPU
    try:
        out = [as_int(s) for s in splits]
    except TypeError:  # not a sequence (one int, a 0-d tensor)
        out = []
    if len(out) != w or any(s is None or not 0 <= s <= _MAX_SPLIT for s in out):
        raise ValueError(f"ditron.ops.{op}: {what} must be {w} non-negative int sizes "
                         f"(below 2**63), got {splits!r}")
    return out


#: ``_gather_splits``' kinds of a call: uneven splits, even ones given, none given
_UNEVEN, _EVEN, _NO_SPLITS = 0, 1, 2


def _gather_splits(op: str, fields: dict, ins: list[int], out_splits: Sequence[int] | None,
                   kind: int) -> tuple[list[list[int]], list[list[int] | None], list[int]]:
    """Every rank's ``in_splits`` (the send matrix, ``[sender][receiver]``), its
    ``out_splits`` (``None`` where not given) and its call's ``kind`` (``_UNEVEN``,
    ``_EVEN``, ``_NO_SPLITS``), shared in the host gather that checks that every rank
    passes equal ``fields`` (row shape, dtype, engine): one small tensor all-gather
    (``runtime.agreement.share_agreed``); ranks that disagree raise, and so do all where a
    rank refused its arguments (``_refused_all_to_all``)."""
    w = current().world.world_size
    outs = [-1] * w if out_splits is None else [int(s) for s in out_splits]
    table = share_agreed(f"ditron.ops.{op}", [kind, *ins, *outs], **fields)
    return ([t[1:w + 1] for t in table], [None if t[w + 1] < 0 else t[w + 1:] for t in table],
            [t[0] for t in table])


@public_op
def all_to_all(x: torch.Tensor, in_splits: Sequence[int] | None = None,
               out_splits: Sequence[int] | None = None, *,
               engine: str | None = None) -> torch.Tensor:
    """Rows ``in_splits[q]`` of ``x`` (dim 0, in order) go to rank ``q``; the result holds
    the rows received from ranks ``0..W-1`` in order (``out_splits[q]`` from rank ``q``).

    Sizes may differ per rank and be 0; ``in_splits=None`` (or, as for torch, an empty
    list) splits ``x`` evenly, ``out_splits=None`` (or empty) takes the sizes the peers
    send. Equivalent:
    ``dist.all_to_all_single(out, x, out_splits, in_splits)``. The split sizes are
    gathered on the host each call where any are given (a peer may give other ones);
    calls without splits are checked once per shape, after which a call without splits at
    that shape must be one on every rank (``DITRON_CHECK_CALLS=1`` checks every call); for
    sizes computed on the device use :func:`ditron.ops.all_to_all_device`. Every rank must
    ask for the same ``engine``.
    Even splits on one node with the SM engine run as one fused kernel (CUDA-graph safe;
    ``"auto"`` takes it below ``FUSED_A2A_MAX_BYTES`` per peer and while capturing).
    """
    return all_to_all_counted(x, in_splits, out_splits, engine=engine)[0]


def all_to_all_counted(x: torch.Tensor, in_splits: Sequence[int] | None = None,
                       out_splits: Sequence[int] | None = None, *,
                       engine: str | None = None) -> tuple[torch.Tensor, list[int]]:
    """:func:`all_to_all`, and the rows received from each rank (a host list ``[W]``)."""
    in_splits, out_splits = _none_if_empty(in_splits), _none_if_empty(out_splits)
    with _refused_all_to_all(in_splits is not None or out_splits is not None):
        _check_tensor("all_to_all", x)
        _dim("all_to_all", x, 0)
        xc = viewed(x, moved_as(x.dtype, tuple(x.shape), widen=x.dim() > 1))  # dim 0 is cut
    out, outs = _all_to_all(xc, in_splits, out_splits, engine, x.dtype)
    return viewed(out, x.dtype), outs


def _none_if_empty(splits: Sequence[int] | None) -> Sequence[int] | None:
    """``None`` for an empty list (or 1-D tensor) of split sizes, which
    ``dist.all_to_all_single`` reads as none given (an even split); ``splits`` otherwise."""
    if isinstance(splits, torch.Tensor):
        return None if splits.dim() == 1 and splits.numel() == 0 else splits
    if isinstance(splits, (list, tuple)) and not splits:
        return None
    return splits


def _refused_all_to_all(splits: bool) -> refused_together:
    """:func:`~ditron.runtime.agreement.refused_together` for all_to_all's checks of its own
    arguments (``splits``: this rank gave some), through its gather of split sizes: peers
    make it with ``DITRON_CHECK_CALLS=1``, until a call without splits has been agreed (the
    agreed shapes are the same on every rank), and, as far as this rank can tell, where it
    gave splits itself (ranks usually all do or all don't)."""
    rt = current()
    peers = rt.world.world_size > 1 and (checks_every_call() or splits
                                         or not rt.cache.get("all_to_all_even"))
    return refused_together("ditron.ops.all_to_all", peers)


def _all_to_all(x: torch.Tensor, in_splits: Sequence[int] | None,
                out_splits: Sequence[int] | None, engine: str | None,
                dtype: torch.dtype) -> tuple[torch.Tensor, list[int]]:
    """:func:`all_to_all_counted` of a checked ``x`` of a native dtype (``dtype``: the
    caller's, which the ranks agree on)."""
    op = "all_to_all"
    rt = current()
    w, me = rt.world.world_size, rt.world.rank
    with _refused_all_to_all(in_splits is not None or out_splits is not None):
        ins = _splits(op, in_splits, x.shape[0], w, "in_splits")
        if sum(ins) != x.shape[0]:
            raise ValueError(f"ditron.ops.{op}: in_splits {ins} sum to {sum(ins)}, but x has "
                             f"{x.shape[0]} rows")
        if out_splits is not None:
            _splits(op, out_splits, 0, w, "out_splits")
        row = math.prod(x.shape[1:])
        even = all(s == ins[0] for s in ins) and (out_splits is None or (
            len(out_splits) == w and all(int(s) == ins[0] for s in out_splits)))
        asked = requested_engine(op, engine)
        eng = _engine(op, asked, x.numel() * x.element_size() // w, fusable=even)
    fields = {"row_shape": tuple(x.shape[1:]), "dtype": dtype,
              "engine": asked}
    even_key = ("all_to_all even", tuple(x.shape), dtype, eng)
    agreed_even = rt.cache.setdefault("all_to_all_even", set())
    no_splits = in_splits is None and out_splits is None
    if no_splits and even_key in agreed_even and not checks_every_call():
        # no rank gave splits at this shape before: no host round trip. (Even splits given
        # are gathered: a peer may give uneven ones in the same call.)
        matrix, given = [ins] * w, [None] * w
    else:
        kind = (_NO_SPLITS if in_splits is None and out_splits is None
                else _EVEN if even else _UNEVEN)
        matrix, given, kinds = _gather_splits(op, fields, ins, out_splits, kind)
        same = all(r == matrix[0] for r in matrix)
        if all(k == _NO_SPLITS for k in kinds) and not same:
            rows = ", ".join(f"rank {r}: {sum(m)}" for r, m in enumerate(matrix))
            raise ValueError(f"ditron.ops.{op}: ranks disagree on the call (no splits given, "
                             f"but x's rows differ: {rows})")
        if all(k == _NO_SPLITS for k in kinds) and same and not checks_every_call():
            # no rank gave splits: later calls without splits at this shape skip the host
            # round trip, on every rank at once
            agreed_even.add(even_key)
    outs = [matrix[r][me] for r in range(w)]
    if out_splits is not None and [int(s) for s in out_splits] != outs:
        raise ValueError(f"ditron.ops.{op}: out_splits {list(out_splits)} on rank {me} do not "
                         f"match what the peers send ({outs})")
    for r, o in enumerate(given):
        if o is not None and o != [matrix[p][r] for p in range(w)]:
            raise ValueError(f"ditron.ops.{op}: out_splits of rank {r} do not match what its "
                             f"peers send")
    uniform = len(set(matrix[0])) <= 1 and all(r == matrix[0] for r in matrix)
    if even and not uniform:  # every rank decides as the ranks with uneven splits do
        eng = _engine(op, asked, x.numel() * x.element_size() // w, fusable=False)
    if w == 1:
        return _copy_out(x), outs
    if uniform and _fused_ok(eng, x.numel(), op):
        flat = x.contiguous().view(-1)
        out = fused_launch.run(flat, kfc.ALL_TO_ALL, torch.empty_like(flat)).view(x.shape)
        return out, outs
    xc = x.contiguous().view(x.shape[0], row)
    capacity = max(sum(matrix[p][q] for p in range(w)) for q in range(w)) * row
    parts, start = [], 0
    for q in range(w):
        dst = sum(matrix[r][q] for r in range(me)) * row
        parts.append(Part(q, xc[start: start + ins[q]].view(-1), dst))
        start += ins[q]
    recvs, start = {}, 0
    for q in range(w):
        recvs[q] = (start * row, outs[q] * row)
        start += outs[q]
    call = exchange(op, x.dtype, capacity, parts, recvs, eng)
    out = _copy_out(call.inbox[: start * row].view(start, *x.shape[1:]))
    call.finish()
    return out, outs
