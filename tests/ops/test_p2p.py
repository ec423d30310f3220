"""Point-to-point ``ditron.ops.send`` / ``recv`` (``ops/p2p.py``): every moved dtype bit for
bit, odd layouts, several peers, and calls that stay in step after a refusal."""

from __future__ import annotations

import pytest
import torch

import ditron

from .poison import poison_empty


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")  # fresh workspaces read as NaN


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values as bytes (bit-for-bit comparisons of any dtype)."""
    return t.resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)


def _payloads(dev: torch.device) -> list[torch.Tensor]:
    """A tensor of every kind ``send`` moves, the same on every rank."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 6, generator=g) * 8
    return [x.to(torch.float8_e4m3fn), x > 0, x.to(torch.int16), x.to(torch.bfloat16)[:, ::2],
            torch.randn(3, 2, dtype=torch.complex64, generator=g), x.to(torch.float64).t(),
            torch.empty(0, 5), torch.tensor(2.5), x.to(torch.uint8)[1:, 1:]]


def check_dtypes_and_layouts() -> int:
    """Rank 0 sends each payload (some non-contiguous); rank 1 receives it by shape and
    again into a transposed (non-contiguous) tensor: the bits arrive unchanged."""
    poison_empty()  # the outputs ``recv`` makes or is given start as NaN / integer maxima
    me, dev = ditron.world().rank, ditron.world().device
    checks = 0
    for x in _payloads(dev):
        x = x.to(dev)
        if me == 0:
            ditron.ops.send(x, 1)
            ditron.ops.send(x, 1)
            continue
        got = ditron.ops.recv(tuple(x.shape), 0, dtype=x.dtype)
        out = torch.empty(tuple(reversed(x.shape)), dtype=x.dtype, device=dev).permute(
            tuple(reversed(range(x.dim()))))
        into = ditron.ops.recv(out, 0)
        assert into is out and got.shape == x.shape and got.dtype == x.dtype
        assert torch.equal(_bits(got), _bits(x)), x.dtype
        assert torch.equal(_bits(out), _bits(x)), x.dtype
        checks += 2
    return checks


def test_send_recv_every_moved_dtype_and_layout(backend):
    assert ditron.launch(check_dtypes_and_layouts, 2, backend=backend) == [0, 18]


def check_conjugate_views() -> list[bool]:
    """``x.conj()`` (a complex view whose bits are not its values) is sent by value, and
    received into; a plain pair of calls afterwards is in step. Before: the send raised
    after its header had gone (``Tensor.view(dtype)`` refuses conjugate views), so the
    receiver got the next call's header as rows (a gloo abort); the recv raised without
    taking the rows, so the next recv read them as its header."""
    me, dev = ditron.world().rank, ditron.world().device
    x = torch.randn(3, 2, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    x = x.to(dev)
    if me == 0:
        ditron.ops.send(x.conj(), 1)
        ditron.ops.send(x, 1)
        ditron.ops.send(x.conj().t(), 1)
        ditron.ops.send(x * 2, 1)
        return []
    got = ditron.ops.recv((3, 2), 0, dtype=torch.complex64)
    out = torch.zeros(3, 2, dtype=torch.complex64, device=dev)
    into = ditron.ops.recv(out.conj(), 0)
    strided = torch.zeros(3, 2, dtype=torch.complex64, device=dev).t().conj()
    ditron.ops.recv(strided, 0)
    after = ditron.ops.recv((3, 2), 0, dtype=torch.complex64)
    return [torch.equal(got, x.conj()), into.is_conj() and torch.equal(into, x),
            torch.equal(out, x.conj()), torch.equal(strided, x.conj().t()),
            torch.equal(after, x * 2)]


def test_send_recv_conjugate_views(backend):
    assert ditron.launch(check_conjugate_views, 2, backend=backend) == [[], [True] * 5]


def _sent(src: int, dst: int, it: int) -> torch.Tensor:
    """The fresh random rows ``src`` sends ``dst`` in call ``it`` (``1 + src`` of them)."""
    g = torch.Generator().manual_seed(10_000 * it + 100 * src + dst)
    return torch.randn(1 + src, 3, generator=g)


def check_several_peers(calls: int = 2) -> int:
    """Every pair of ranks swaps rows of its own size (the lower rank sends first), on
    repeated calls with new data; then rank 0 receives from the others in reverse order."""
    poison_empty()
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    checks = 0
    for it in range(calls):
        for p in range(w):
            if p == me:
                continue
            mine = _sent(me, p, it).to(dev)
            if me < p:
                ditron.ops.send(mine, p)
                got = ditron.ops.recv((1 + p, 3), p)
            else:
                got = ditron.ops.recv((1 + p, 3), p)
                ditron.ops.send(mine, p)
            assert torch.equal(got.cpu(), _sent(p, me, it)), (p, it)
            checks += 1
    if me == 0:
        for p in reversed(range(1, w)):
            got = ditron.ops.recv((p,), p, dtype=torch.int32)
            assert torch.equal(got.cpu(), torch.full((p,), p, dtype=torch.int32))
            checks += 1
    else:
        ditron.ops.send(torch.full((me,), me, dtype=torch.int32, device=dev), 0)
    return checks


@pytest.mark.parametrize("world_size", [3, 4])
def test_send_recv_between_several_peers(world_size, backend):
    counts = ditron.launch(check_several_peers, world_size, backend=backend)
    assert counts == [3 * (world_size - 1)] + [2 * (world_size - 1)] * (world_size - 1)


def check_alone() -> int:
    """A world of one rank has no peer: both ends refuse at once."""
    x = torch.zeros(2, device=ditron.world().device)
    with pytest.raises(ValueError, match=r"peer 0 must be another rank in \[0, 1\)"):
        ditron.ops.send(x, 0)
    with pytest.raises(ValueError, match=r"peer 1 must be another rank in \[0, 1\)"):
        ditron.ops.recv(x, 1)
    return 2


def test_send_recv_in_a_world_of_one(backend):
    assert ditron.launch(check_alone, 1, backend=backend) == [2]


def check_shape_forms() -> list[str]:
    """``recv`` by one int (a 1-d shape, as ``torch.empty(5)``); a ``dtype`` that disagrees
    with the given tensor, and no shape at all, are refused (the dtype was ignored; None
    failed inside the shape's loop), and the pair stays in step (a refused ``recv`` takes
    what the sender sends)."""
    me, dev = ditron.world().rank, ditron.world().device
    x = torch.arange(5, dtype=torch.float32, device=dev)
    if me == 0:
        for _ in range(5):
            ditron.ops.send(x, 1)
        return []
    seen = []
    got = ditron.ops.recv(5, 0)
    assert torch.equal(got, x)
    with pytest.raises(ValueError, match="dtype torch.int32 given with a tensor of "
                                         "torch.float32"):
        ditron.ops.recv(torch.empty(5, device=dev), 0, dtype=torch.int32)
    seen.append("refused")
    out = torch.empty(5, device=dev)
    assert ditron.ops.recv(out, 0, dtype=torch.float32) is out and torch.equal(out, x)
    with pytest.raises(TypeError, match="expected a tensor, a shape or a size"):
        ditron.ops.recv(None, 0)
    assert torch.equal(ditron.ops.recv((5,), 0), x)
    return seen + ["in step"]


def test_recv_shape_forms(backend):
    assert ditron.launch(check_shape_forms, 2, backend=backend) == [[], ["refused", "in step"]]


def check_capture_without_nccl() -> list[str]:
    """While a CUDA graph is captured (emulated: ``p2p.capturing``) over a world whose
    device group is not NCCL (gloo: ranks sharing a GPU, or the CPU backend), both ends
    refuse before moving anything, and the next pair of calls is in step. Before, they
    went ahead: on GPUs the rows are staged through host memory there, which a capture
    cannot hold, so the send failed after its header had gone and the receiver waited."""
    from ditron.ops import p2p

    me, dev = ditron.world().rank, ditron.world().device
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(5)).to(dev)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(p2p, "capturing", lambda: True, raising=False)
        mp.setattr(p2p, "collectives_capturable", lambda: False, raising=False)  # gloo
        with pytest.raises(RuntimeError, match=r"ditron.ops.(send|recv): cannot be captured "
                                               r"in a CUDA graph here"):
            if me == 0:
                ditron.ops.send(x, 1)
            else:
                ditron.ops.recv((4, 3), 0)
    if me == 0:
        ditron.ops.send(x * 3, 1)
        return ["refused"]
    assert torch.equal(ditron.ops.recv((4, 3), 0), x * 3)
    return ["refused", "in step"]


def test_send_recv_refuse_capture_without_nccl(backend):
    assert ditron.launch(check_capture_without_nccl, 2, backend=backend) == \
        [["refused"], ["refused", "in step"]]
