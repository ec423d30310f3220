"""The ``sm`` engine moves the transfers of one launch group (dtype, reduce, signal value) at
once: a batch in which one of them writes memory another reads or writes is refused before
anything moves (on a GPU their programs race: two sums into one buffer lost updates; the
CPU backend's interpreter runs programs one after another, so it summed right there). The
copy engine moves a batch in order and takes such a batch."""

from __future__ import annotations

import pytest
import torch

import ditron
from ditron.engines import Signal, Transfer, get_engine
from ditron.engines.sync import wait_slots


def _data(seed: int, rank: int, what: str, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((seed, rank, what)) % (1 << 62))
    return torch.randn(n, generator=g)


def check_batches(seed: int, n: int) -> list:
    """Refused batches (their error, and whether anything moved or a signal rose), then the
    same moves that race issued as allowed (separate batches, other groups, copy engine),
    checked against torch."""
    w = ditron.world()
    me, right, left = w.rank, (w.rank + 1) % w.world_size, (w.rank - 1) % w.world_size
    sm = get_engine("sm", programs=3, block=64)
    pad = ditron.signal_pad("test_sm_batch_races", 4)
    box = ditron.zeros((2 * n,), torch.float32)
    a, b = _data(seed, me, "a", n), _data(seed, me, "b", n)
    x, y, z = (_data(seed, me, k, n) for k in "xyz")
    base = _data(seed, me, "base", 2 * n)
    out = []

    def reset() -> None:
        box.copy_(base)
        pad.signals.zero_()
        ditron.barrier()

    refused = {
        # two sums into the right neighbour's box (the same bytes, then half of them)
        "sums": [Transfer(a, box[:n], me, right, Signal(pad, 0, 1), reduce=True),
                 Transfer(b, box[:n], me, right, Signal(pad, 1, 1), reduce=True)],
        "half": [Transfer(a, box[:n], me, right, reduce=True),
                 Transfer(b[: n // 2], box[n // 2: n], me, right, reduce=True)],
        # a local copy out of a buffer another transfer fills
        "chain": [Transfer(x, y, me, me), Transfer(y, z, me, me)],
        # a pull into my box and a push out of it
        "pull-push": [Transfer(box[:n], box[:n], left, me),
                      Transfer(box[:n], box[n:], me, right)],
    }
    for name, batch in refused.items():
        reset()
        kept = (x.clone(), y.clone(), z.clone())
        with pytest.raises(ValueError) as info:
            sm.issue(batch)
        sm.drain()
        ditron.barrier()
        moved = not (torch.equal(box, base) and torch.equal(x, kept[0])
                     and torch.equal(y, kept[1]) and torch.equal(z, kept[2]))
        out.append((name, str(info.value).split(" (one writes")[0], moved,
                    pad.signals.tolist()))
    # allowed: both sums in separate batches, in two groups (signal values), and by the
    # copy engine in one batch; then reads of one source by two transfers
    want = base.clone()
    want[:n] += _data(seed, left, "a", n) + _data(seed, left, "b", n)
    for how in ("separate", "groups", "copy_engine"):
        reset()
        sums = [Transfer(a, box[:n], me, right, Signal(pad, 2, 1), reduce=True),
                Transfer(b, box[:n], me, right, Signal(pad, 3, 2), reduce=True)]
        if how == "separate":
            for t in sums:
                sm.issue([t])
            sm.drain()
        else:
            engine = sm if how == "groups" else get_engine("copy_engine")
            engine.issue(sums)
            engine.drain()
        wait_slots(pad, 2, range(0, 1), 1)
        wait_slots(pad, 3, range(0, 1), 2)
        ditron.barrier()
        torch.testing.assert_close(box, want, rtol=1e-6, atol=1e-6)
        out.append(how)
    reset()  # the same transfer twice: refused, naming both of its places
    twice = Transfer(a, box[:n], me, right, reduce=True)
    with pytest.raises(ValueError, match="transfers 1 and 2 of a batch of 3 overlap"):
        sm.issue([Transfer(x, box[n:], me, right), twice, twice])
    reset()
    sm.issue([Transfer(x, box[:n], me, right), Transfer(x, box[n:], me, right)])
    sm.drain()
    ditron.barrier()
    left_x = _data(seed, left, "x", n)
    out.append(torch.equal(box, torch.cat([left_x, left_x])))
    ditron.barrier()
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sm_engine_refuses_batches_that_race(world_size):
    # before: each refused batch was launched; the CPU backend's sequential programs gave
    # the sums (and the chain) in batch order, a GPU's concurrent ones lost updates
    seed = int(torch.randint(0, 1 << 30, (1,)))
    got = ditron.launch(check_batches, world_size, seed, 300, backend="cpu")
    for rank, out in enumerate(got):
        right = (rank + 1) % world_size
        where = {"sums": right, "half": right, "chain": rank, "pull-push": rank}
        assert out[:4] == [
            (name, f"sm engine: transfers 0 and 1 of a batch of 2 overlap in memory on rank "
                   f"{r}", False, [0, 0, 0, 0]) for name, r in where.items()], (rank, seed)
        assert out[4:] == ["separate", "groups", "copy_engine", True], (rank, seed)
