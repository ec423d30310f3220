"""Point-to-point: :func:`send` and :func:`recv`, like ``dist.send`` / ``dist.recv``, over
the network engine (no symmetric channel: the two ranks need not allocate anything
together). A small header (shape, dtype) goes first over the host group, so the receiver
reports a mismatch instead of receiving garbage.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..engines.base import Transfer
from ..runtime.dtypes import carried
from ..runtime.integers import as_int, check_int
from ..runtime.world import current
from .collectives import ENGINES, _check_tensor, check_writable
from .exchange import engine_instance
from .graphs import capturing, collectives_capturable
from .modes import public_op

__all__ = ["recv", "send"]

#: every dtype torch has, in one order on every rank: the header's code is the index
_DTYPES = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
_DTYPE_CODES = {d: i for i, d in enumerate(_DTYPES)}
_HEADER = 10


def _p2p_engine(op: str, engine: str | None) -> None:
    name = engine or os.environ.get("DITRON_P2P_ENGINE") or "auto"
    if name in ("auto", "network"):
        return
    if name in ENGINES:
        raise NotImplementedError(
            f"ditron.ops.{op}: engine {name!r} needs a symmetric channel allocated by both "
            f"ranks; point-to-point currently goes through the network engine only")
    raise ValueError(f"ditron.ops.{op}: unknown engine {name!r}")


def _refuse_capture(op: str) -> None:
    """Raise while a CUDA graph is captured unless the rows would go through NCCL: through
    the gloo group (ranks sharing a GPU) they are staged in host memory, which a capture
    cannot hold (it failed after the header had gone, leaving the peer waiting)."""
    if capturing() and not collectives_capturable():
        raise RuntimeError(f"ditron.ops.{op}: cannot be captured in a CUDA graph here: the "
                           f"world's device group is not NCCL, so the rows are staged "
                           f"through host memory; call it outside the capture")


def _is_peer(peer) -> bool:
    """Whether ``peer`` is an integer naming another rank of the world."""
    w = current().world
    rank = as_int(peer)
    return rank is not None and 0 <= rank < w.world_size and rank != w.rank


def _peer(op: str, peer: int) -> int:
    """``peer`` as an int, refused unless it names another rank of the world."""
    if not _is_peer(peer):
        raise ValueError(f"ditron.ops.{op}: peer {peer!r} must be another rank in "
                         f"[0, {current().world.world_size})")
    return as_int(peer)


def _header(op: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    if len(shape) > _HEADER - 2:
        raise ValueError(f"ditron.ops.{op}: point-to-point supports at most {_HEADER - 2} "
                         f"dimensions, got {len(shape)}")
    h = torch.full((_HEADER,), -1, dtype=torch.int64, device="cpu")
    h[0], h[1] = len(shape), _DTYPE_CODES[dtype]
    h[2: 2 + len(shape)] = torch.tensor(list(shape), dtype=torch.int64, device="cpu")
    return h


#: a header's first entry (the number of dimensions) when the sender failed before sending
_FAILED = -1


@public_op
def send(x: torch.Tensor, dst: int, *, engine: str | None = None) -> None:
    """Send ``x`` to rank ``dst`` (which calls :func:`recv`). Equivalent: ``dist.send(x, dst)``.

    A small header (shape, dtype) goes first over the host group so that the receiver can
    report a mismatch instead of receiving garbage; when ``x`` or ``engine`` is refused
    here, the header says so and the receiver raises too instead of waiting.
    """
    rt = current()
    try:
        _refuse_capture("send")
        _check_tensor("send", x)
        _p2p_engine("send", engine)
        header = _header("send", x.shape, x.dtype)
        flat = carried(x).contiguous()  # before the header: a failure says so
    except Exception:
        if _is_peer(dst):
            failed = torch.full((_HEADER,), _FAILED, dtype=torch.int64, device="cpu")
            dist.send(failed, group=rt.host_group, group_dst=as_int(dst))
        raise
    dst = _peer("send", dst)
    dist.send(header, group=rt.host_group, group_dst=dst)
    net = engine_instance("network")
    net.issue([Transfer(flat, flat, rt.world.rank, dst)])
    net.drain()


@public_op
def recv(x_or_shape: torch.Tensor | Sequence[int], src: int, *,
         dtype: torch.dtype | None = None, engine: str | None = None) -> torch.Tensor:
    """Receive from rank ``src`` into ``x_or_shape`` (a tensor, filled and returned) or a new
    tensor of that shape (a sequence of ints, or one int) and ``dtype`` (default fp32; with
    a tensor it must be the tensor's, or None). Equivalent: ``dist.recv(out, src); out``.

    Raises when the sender's rows differ in shape or dtype, when its :func:`send` was
    refused, and when ``x_or_shape`` or ``engine`` is refused here; in every case (``src``
    another rank) after taking whatever the sender sends, so that neither rank waits and
    the next pair of calls between them is in step.
    """
    rt = current()
    try:
        _refuse_capture("recv")
        if isinstance(x_or_shape, torch.Tensor):
            out = x_or_shape
            if dtype is not None and dtype != out.dtype:
                raise ValueError(f"ditron.ops.recv: dtype {dtype} given with a tensor of "
                                 f"{out.dtype} (dtype is for a shape; leave it out)")
        else:
            try:  # a shape: any iterable of ints (a NumPy array too), or one int
                sizes = ((x_or_shape,) if as_int(x_or_shape) is not None
                         else tuple(x_or_shape))
            except TypeError:
                raise TypeError(f"ditron.ops.recv: expected a tensor, a shape or a size, got "
                                f"{type(x_or_shape).__name__}") from None
            shape = tuple(check_int(s, "ditron.ops.recv: a size of the shape") for s in sizes)
            out = torch.empty(shape, dtype=torch.float32 if dtype is None else dtype,
                              device=rt.world.device)
        _check_tensor("recv", out)
        check_writable("recv", out)
        _p2p_engine("recv", engine)
        expected = _header("recv", out.shape, out.dtype)
        into = carried(out)  # before the header: a failure takes the sender's rows
    except Exception:
        if _is_peer(src):
            _take(as_int(src), _received_header(as_int(src)))
        raise
    src = _peer("recv", src)
    header = _received_header(src)
    if not torch.equal(header, expected):
        sent = _take(src, header)
        if sent is None:
            raise RuntimeError(f"ditron.ops.recv: rank {src}'s matching send was refused "
                               f"there before it sent (its error says why)")
        raise ValueError(f"ditron.ops.recv: rank {src} sent shape {tuple(sent.shape)} "
                         f"{sent.dtype}, but this rank receives {tuple(out.shape)} "
                         f"{out.dtype}")
    net = engine_instance("network")
    net.issue([Transfer(into, into, src, rt.world.rank)])
    net.drain()
    return out


def _received_header(src: int) -> torch.Tensor:
    header = torch.empty(_HEADER, dtype=torch.int64, device="cpu")
    dist.recv(header, group=current().host_group, group_src=src)
    return header


def _take(src: int, header: torch.Tensor) -> torch.Tensor | None:
    """Receive and return the rows ``header`` announces from ``src`` (into a new tensor),
    keeping the channel in step; ``None`` for the header of a refused send (no rows)."""
    nd = int(header[0])
    if nd == _FAILED:
        return None
    rt = current()
    sent = torch.empty(tuple(header[2: 2 + nd].tolist()), dtype=_DTYPES[int(header[1])],
                       device=rt.world.device)
    into = carried(sent)
    net = engine_instance("network")
    net.issue([Transfer(into, into, src, rt.world.rank)])
    net.drain()
    return sent
