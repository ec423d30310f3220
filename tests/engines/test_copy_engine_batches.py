"""A copy-engine batch runs whole or not at all: a transfer that torch's ``copy_`` / ``add_``
cannot do where it lands (a side with no memory, a sum across devices) is refused before
any transfer of the batch moves or raises its signal."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots


def _payload(rank: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(n, generator=g)


def check_refused_batch(bad_kind: str, seed: int) -> tuple[str, bool, list[int], bool]:
    """Push a good transfer, then (in the same batch) a bad one of ``bad_kind``, into the
    peer's poisoned box: the refusal's text, whether the box kept its poison and the pad
    stayed 0, and whether the good transfer, issued again alone, lands."""
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    n = 96
    pad = ditron.signal_pad(f"test_copy_batches:{bad_kind}", 2)
    box = ditron.empty((2, n), torch.float32)
    box.fill_(float("nan"))
    ditron.barrier()
    mine = _payload(me, n, seed).to(w.device)
    good = Transfer(mine, box[0], me, peer, Signal(pad, 0, 1))
    if bad_kind == "meta copy":
        bad = Transfer(torch.empty(n, device="meta"), box[1], me, peer, Signal(pad, 1, 1))
    elif bad_kind == "meta sum":
        bad = Transfer(torch.empty(n, device="meta"), box[1], me, peer, Signal(pad, 1, 1),
                       reduce=True)
    else:  # "host sum": a host src summed into a GPU's dst (the cuda backend only)
        bad = Transfer(torch.ones(n), box[1], me, peer, Signal(pad, 1, 1), reduce=True)
    engine = get_engine("copy_engine")
    with pytest.raises(ValueError) as info:
        engine.issue([good, bad])
        engine.drain()
    engine.drain()
    if w.device.type == "cuda":
        torch.cuda.synchronize()
    ditron.barrier()
    untouched = bool(box.isnan().all()) and not bool(pad.signals.any())
    signals = pad.signals.tolist()
    ditron.barrier()
    engine.issue([good])
    wait_slots(pad, 0, range(0, 1), 1)
    engine.drain()
    landed = torch.equal(box[0].cpu(), _payload(peer, n, seed)) and bool(box[1].isnan().all())
    ditron.barrier()
    return str(info.value), untouched, signals, landed


@pytest.mark.parametrize("bad_kind,match", [
    ("meta copy", "src and dst must hold data; got tensors on meta and"),
    ("meta sum", "src and dst must hold data; got tensors on meta and")])
def test_copy_engine_refuses_a_side_without_data_before_moving(backend, bad_kind, match):
    # before: the good push landed and raised its signal, then the worker thread failed on
    # the meta copy ("Cannot copy out of meta tensor") at drain; a meta sum was worse: torch's
    # add_ of a meta tensor into a host tensor does nothing, and its signal was raised
    seed = int(torch.randint(0, 1 << 30, ()))
    got = ditron.launch(check_refused_batch, 2, bad_kind, seed, backend=backend)
    for rank, (error, untouched, signals, landed) in enumerate(got):
        assert match in error, error
        assert f"(transfer 1 of a batch of 2: rank {rank} to rank {1 - rank})" in error
        assert untouched and signals == [0, 0] and landed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_copy_engine_refuses_a_host_sum_into_the_gpu_before_moving_cuda():
    # before: dst.add_(src) raised "Expected all tensors to be on the same device" inside
    # the issue, after the good push had been queued with its signal
    seed = int(torch.randint(0, 1 << 30, ()))
    got = ditron.launch(check_refused_batch, 2, "host sum", seed, backend="cuda")
    for error, untouched, signals, landed in got:
        assert "add_, which needs them on one device; got cpu and cuda" in error, error
        assert untouched and signals == [0, 0] and landed


def test_copy_engine_sum_check_needs_one_device():
    # the rule itself (a host and a GPU tensor cannot both be made here: meta stands in for
    # the other device); an empty sum moves nothing and passes
    from ditron.engines.copy_engine import _check_sum

    x = torch.randn(8)
    with pytest.raises(ValueError, match="needs them on one device; got meta and cpu"):
        _check_sum(Transfer(torch.empty(8, device="meta"), x, 0, 0, reduce=True))
    with pytest.raises(ValueError, match="needs them on one device; got cpu and meta"):
        _check_sum(Transfer(x, torch.empty(8, device="meta"), 0, 0, reduce=True))
    _check_sum(Transfer(torch.empty(0, device="meta"), torch.empty(0), 0, 0, reduce=True))
    _check_sum(Transfer(x, torch.randn(8), 0, 0, reduce=True))
    with pytest.raises(ValueError, match="cannot sum dtype torch.bool"):
        _check_sum(Transfer(x > 0, x < 0, 0, 0, reduce=True))
