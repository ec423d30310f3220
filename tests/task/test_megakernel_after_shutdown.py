"""A megakernel compiled in a world that was shut down: its calls are refused, naming the
cause, in a new world of the same ranks and in none; ``free`` then does nothing."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import ditron
from ditron import task as dt

from .test_megakernel import _push_right_tile


@triton.jit
def _use_left_tile(tile, inbox, out, n, ctx, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    left = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    tl.store(out + offs, 2 * tl.load(inbox + left * n + offs, mask=offs < n), mask=offs < n)


def _ring(n: int = 16):
    """Each rank pushes ``src`` into its right neighbour's ``inbox``, which doubles what its
    left neighbour pushed into ``out``."""
    w = ditron.world()
    W = w.world_size
    src, out = torch.empty(n, device=w.device), torch.empty(n, device=w.device)
    inbox = ditron.zeros(W * n)
    g = dt.TaskGraph("ring")
    g.add("push", _push_right_tile, src, inbox, n, dt.CTX, 16, tiles=1,
          reads=lambda t, r: dt.region(src),
          writes=lambda t, r: dt.region(inbox, (r * n, r * n + n), rank=(r + 1) % W))
    g.add("use", _use_left_tile, inbox, out, n, dt.CTX, 16, tiles=1,
          reads=lambda t, r: dt.region(inbox, (((r - 1) % W) * n, ((r - 1) % W) * n + n)),
          writes=lambda t, r: dt.region(out))
    return g.compile(), src, out


def _check(mk, src, out, call: int) -> None:
    w = ditron.world()
    left = (w.rank - 1) % w.world_size
    src.copy_(torch.randn(src.numel(), generator=torch.Generator().manual_seed(
        10 * call + w.rank)))
    expected = 2 * torch.randn(src.numel(), generator=torch.Generator().manual_seed(
        10 * call + left)).to(out.device)
    out.fill_(float("nan"))
    mk()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def _called_after_shutdown() -> list[str]:
    """Shut down and ``init`` again: the old megakernel is refused (its heap, scoreboard and
    wait diagnostics are the old world's), a new compile runs; with no world at all it is
    refused too, and freeing it does nothing."""
    backend = ditron.world().backend
    mk, src, out = _ring()
    _check(mk, src, out, 0)
    ditron.shutdown()
    ditron.init(backend)
    errors = []
    with pytest.raises(RuntimeError) as info:
        mk()
    errors.append(str(info.value))
    assert mk.calls == 1  # a refused call is no call
    mk.free()  # the old heap is gone: nothing to give back, no error
    new, src, out = _ring()
    for call in range(1, 3):
        _check(new, src, out, call)
    ditron.shutdown()
    with pytest.raises(RuntimeError) as info:
        new()
    errors.append(str(info.value))
    ditron.init(backend)
    return errors


def test_megakernel_of_a_world_shut_down_is_refused(backend):
    """The old megakernel ran after ``shutdown`` and a new ``init``: on the old heaps
    (still mapped) and scoreboard, its wait timeouts recorded where no check looked,
    silently."""
    got = ditron.launch(_called_after_shutdown, 2, backend=backend)
    for errors in got:
        for message in errors:
            assert message.startswith("ditron.task: the megakernel of graph 'ring' was "
                                      "compiled in a world that has been shut down"), message
            assert "compile the graph again" in message, message


def _timeout_in_another_world() -> str | None:
    """Ranks 0 and 1 compile the ring in their world of two; rank 0 calls it alone while
    the job's world is current: its wait gives up, which the call raises."""
    job = ditron.world()
    me = job.rank
    ditron.init(job.backend, group=[0, 1] if me < 2 else [2])
    if me == 2:
        return None
    mk, src, out = _ring()
    if me == 1:
        return None  # never calls
    with ditron.use(job):
        with pytest.raises(ditron.WaitTimeoutError) as info:
            mk()
    return str(info.value)


def test_megakernel_checks_the_waits_of_its_own_world(backend, monkeypatch):
    """Called while another world was current, a megakernel whose wait gave up returned
    normally: the check read the current world's diagnostics, not its own world's."""
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0.5")
    got = ditron.launch(_timeout_in_another_world, 3, backend=backend)
    assert got[1] is None and got[2] is None
    assert "rank 0: wait on signal megakernel:ring[" in got[0], got[0]
