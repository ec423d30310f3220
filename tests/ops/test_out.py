"""``ditron.ops.all_gather(x, dim, out=...)`` and ``reduce_scatter(x, dim, out=...)``: the
result written into a given tensor on every path (plain, strided and symmetric ``out``, every
engine), and torch.distributed's in-place forms (input inside ``out``, ``out`` inside the
input), against torch on fresh random data for world sizes 1-3; bad ``out`` raises before
any kernel. On the GPU: the all-gather's direct path into a symmetric ``out`` (also run with
emulated driver calls on the CPU in ``test_raw_pushes.py``) and the eager calls replayed
from CUDA graphs (``ops/replays.py``), with ranks whose graph caches differ."""

from __future__ import annotations

import types

import pytest
import torch

import ditron

from .poison import poison_empty
from .test_collectives import DTYPES, _close, _gather_fp32, _gen, _same, _sum_ref


def _outs(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device):
    """``(kind, out)``: a plain tensor, a transposed (non-contiguous) one and a symmetric
    one (collective), each NaN-filled."""
    plain = torch.empty(shape, dtype=dtype, device=device)
    strided = torch.empty(shape[::-1], dtype=dtype, device=device).t()
    symmetric = ditron.empty(shape, dtype)
    for out in (plain, strided, symmetric):
        out.fill_(float("nan"))
    return [("plain", plain), ("strided", strided), ("symmetric", symmetric)]


def _into_each_out(op: str, x: torch.Tensor, dim: int, engine: str, ref: torch.Tensor,
                   what: str) -> int:
    """``op(x, dim)`` into each kind of ``out`` (:func:`_outs`), each compared with ``ref``;
    returns the number of checks."""
    device = ditron.world().device
    checks = 0
    for kind, out in _outs(tuple(ref.shape), ref.dtype, device):
        got = getattr(ditron.ops, op)(x, dim, engine=engine, out=out)
        assert got is out, f"{op} {engine} {kind} dim {dim}: did not return out"
        check = _same if op == "all_gather" else _close  # a gather moves bytes only
        check(out.cpu(), ref, f"{op} {engine} into {kind} out, dim {dim}, {what}")
        checks += 1
        if kind == "symmetric":
            ditron.free(out)
    return checks


def _rounds(engines: tuple[str, ...], calls: int):
    """``(call, engine, dtype)`` for each engine in each of ``calls`` rounds, the dtype
    alternating, after poisoning fresh symmetric memory."""
    poison_empty()
    k = 0
    for it in range(calls):
        for eng in engines:
            yield it, eng, DTYPES[k % len(DTYPES)]
            k += 1


def check_out(engines: tuple[str, ...], calls: int) -> int:
    me = ditron.world().rank
    checks = 0
    for it, eng, dtype in _rounds(engines, calls):
        x = torch.randn(2 + it, 3 + 2 * it, generator=_gen(me, it, 31)).to(dtype)
        parts = [p.to(dtype) for p in _gather_fp32(x)]
        x = x.to(ditron.world().device)
        for dim in (0, 1):
            ref = torch.cat(parts, dim)
            checks += _into_each_out("all_gather", x, dim, eng, ref, f"call {it}")
    return checks


def check_rs_out(engines: tuple[str, ...], calls: int) -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    checks = 0
    for it, eng, dtype in _rounds(engines, calls):
        for dim in (0, 1):
            shape = [2 + it, 3 + 2 * it]
            shape[dim] *= w
            x = torch.randn(*shape, generator=_gen(me, it, dim, 37)).to(dtype)
            ref = _sum_ref(x).chunk(w, dim)[me]
            x = x.to(ditron.world().device)
            checks += _into_each_out("reduce_scatter", x, dim, eng, ref, f"call {it}")
    return checks


def check_in_place(engines: tuple[str, ...], calls: int) -> int:
    """torch.distributed's in-place forms: an all-gather whose input is this rank's rows of
    ``out`` (a plain and a symmetric ``out``), and a reduce-scatter into this rank's rows of
    its own input."""
    world = ditron.world()
    w, me, device = world.world_size, world.rank, world.device
    checks = 0
    for it, eng, dtype in _rounds(engines, calls):
        m, n = 2 + it, 3 + 2 * it
        mine = slice(me * m, (me + 1) * m)
        x = torch.randn(m, n, generator=_gen(me, it, 41)).to(dtype)
        ref = torch.cat([p.to(dtype) for p in _gather_fp32(x)])
        for kind, buf in (("plain", torch.empty(w * m, n, dtype=dtype, device=device)),
                          ("symmetric", ditron.empty((w * m, n), dtype))):
            buf.fill_(float("nan"))
            buf[mine] = x.to(device)
            got = ditron.ops.all_gather(buf[mine], engine=eng, out=buf)
            assert got is buf
            _same(buf.cpu(), ref, f"in-place all_gather {eng} {kind} out, call {it}")
            checks += 1
            if kind == "symmetric":
                ditron.free(buf)
        x = torch.randn(w * m, n, generator=_gen(me, it, 43)).to(dtype)
        ref = _sum_ref(x)[mine]
        x = x.to(device)
        got = ditron.ops.reduce_scatter(x, engine=eng, out=x[mine])
        _close(got.cpu(), ref, f"in-place reduce_scatter {eng}, call {it}")
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_in_place_forms(world_size):
    engines = ("copy_engine", "sm", "network")
    counts = ditron.launch(check_in_place, world_size, engines, 2, backend="cpu")
    assert counts == [2 * len(engines) * 3] * world_size


def check_bad_out() -> int:
    world = ditron.world()
    x = torch.randn(4, 3, device=world.device)
    w = world.world_size
    bad = [torch.empty(4 * w + 1, 3, device=world.device),
           torch.empty(4 * w, 3, dtype=torch.float16, device=world.device),
           torch.empty(4, 3 * w, device=world.device)]
    raised = 0
    for out in bad:
        with pytest.raises(ValueError, match="all_gather: out is"):
            ditron.ops.all_gather(x, 0, out=out)
        raised += 1
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        ditron.ops.all_gather(x, 0, out=[1, 2])
    xr = torch.randn(4 * w, 3, device=world.device)
    for out in (torch.empty(5, 3, device=world.device),
                torch.empty(4, 3, dtype=torch.float16, device=world.device),
                torch.empty(4 * w, 3, device=world.device)):
        with pytest.raises(ValueError, match="reduce_scatter: out is"):
            ditron.ops.reduce_scatter(xr, 0, out=out)
        raised += 1
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        ditron.ops.reduce_scatter(xr, 0, out=(1,))
    # an out whose rows share memory: torch would refuse to write it after the transfer
    shared = "out has elements that share memory"
    with pytest.raises(ValueError, match=f"all_gather: {shared}"):
        ditron.ops.all_gather(x, 0, out=torch.empty(1, 3, device=world.device).expand(4 * w, 3))
    with pytest.raises(ValueError, match=f"reduce_scatter: {shared}"):
        ditron.ops.reduce_scatter(xr, 0, out=torch.empty(4, 1, device=world.device).expand(4, 3))
    return raised + 4


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_all_gather_into_out(world_size):
    engines = ("copy_engine", "sm", "network")
    counts = ditron.launch(check_out, world_size, engines, 2, backend="cpu")
    assert counts == [2 * len(engines) * 2 * 3] * world_size


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_reduce_scatter_into_out(world_size):
    engines = ("copy_engine", "sm", "network")
    counts = ditron.launch(check_rs_out, world_size, engines, 2, backend="cpu")
    assert counts == [2 * len(engines) * 2 * 3] * world_size


def test_bad_out_raises_before_kernels():
    assert ditron.launch(check_bad_out, 2, backend="cpu") == [10, 10]


def check_direct_cuda(calls: int) -> int:
    """The direct path on CUDA: repeated calls into one symmetric ``out`` and into a new
    one, sizes that change, checked against torch; returns how many calls took it."""
    from ditron.ops import collectives

    taken = []
    original = collectives.push_gather_direct
    collectives.push_gather_direct = lambda *a: (taken.append(1), original(*a))[1]
    poison_empty()
    world = ditron.world()
    me, device = world.rank, world.device
    out = None
    for it in range(calls):
        rows = 1000 + 37 * (it // 3)  # three calls per size and out
        x = torch.randn(rows, 257, generator=_gen(me, it, 53)).to(torch.bfloat16)
        ref = torch.cat([p.to(x.dtype) for p in _gather_fp32(x)], 0)
        if out is None or out.shape != ref.shape:
            if out is not None:
                ditron.free(out)
            out = ditron.empty(tuple(ref.shape), torch.bfloat16)
        out.fill_(float("nan"))
        got = ditron.ops.all_gather(x.to(device), 0, engine="copy_engine", out=out)
        _same(got.cpu(), ref, f"direct all_gather, call {it}")
    ditron.free(out)
    collectives.push_gather_direct = original
    return len(taken)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_all_gather_direct_cuda_two_ranks():
    """On 2 GPUs (one process each) or 1 GPU shared by 2 processes."""
    assert ditron.launch(check_direct_cuda, 2, 9, backend="cuda") == [9, 9]


def check_replays_cuda(calls: int, engine: str) -> dict:
    """Eager all-gathers and reduce-scatters on ``engine`` into plain outs, replayed from
    CUDA graphs (every size replays here), with fresh data in fixed input buffers, two
    sizes in turn, and graph caches that differ between ranks: rank 0 writes into one
    ``out`` per size, the others into three in turn, so in the same call one rank replays
    while another captures or runs uncaptured. Calls without ``out`` (the raw eager path)
    come in between. Returns how the replayed calls ran: ``{outcome: count}``."""
    from ditron.ops import collectives, replays

    outcomes: dict[str, int] = {}
    run = replays.run

    def counted(key, fn):
        r = run(key, fn)
        outcomes[r] = outcomes.get(r, 0) + 1
        return r

    replays.run = counted
    collectives.REPLAY_MIN_BYTES = 0
    poison_empty()
    world = ditron.world()
    w, me, device = world.world_size, world.rank, world.device
    bf16 = torch.bfloat16
    copies = 1 if me == 0 else 3
    bufs = {}
    for rows, cols in [(1000, 257), (3, 4099)]:
        bufs[rows] = (cols, torch.empty(rows, cols, dtype=bf16, device=device),
                      torch.empty(w * rows, cols, dtype=bf16, device=device),
                      [torch.empty(w * rows, cols, dtype=bf16, device=device)
                       for _ in range(copies)],
                      [torch.empty(rows, cols, dtype=bf16, device=device)
                       for _ in range(copies)])
    for it in range(calls):
        cols, x, xr, ag_outs, rs_outs = bufs[(1000, 3)[(it // 2) % 2]]
        g = _gen(me, it, 59)
        x.copy_(torch.randn(x.shape, generator=g))
        xr.copy_(torch.randn(xr.shape, generator=g))
        ag_out, rs_out = ag_outs[it % copies], rs_outs[it % copies]
        ag_out.fill_(float("nan"))
        rs_out.fill_(float("nan"))
        got = ditron.ops.all_gather(x, 0, engine=engine, out=ag_out)
        ref = torch.cat([p.to(bf16) for p in _gather_fp32(x.cpu())], 0)
        _same(got.cpu(), ref, f"replayed all_gather, call {it}")
        got = ditron.ops.reduce_scatter(xr, 0, engine=engine, out=rs_out)
        rs_ref = _sum_ref(xr.cpu()).chunk(w, 0)[me]
        _close(got.cpu(), rs_ref, f"replayed reduce_scatter, call {it}")
        if it % 3 == 2:  # the raw eager path in between, on the same ops
            _close(ditron.ops.reduce_scatter(xr, 0, engine=engine).cpu(), rs_ref,
                   f"eager reduce_scatter, call {it}")
            _same(ditron.ops.all_gather(x, 0, engine=engine).cpu(), ref,
                  f"eager all_gather, call {it}")
    replays.run = run
    return outcomes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("engine", ["copy_engine", "sm"])
def test_replays_cuda_two_ranks(monkeypatch, engine):
    """On 2 GPUs (one process each) or 1 GPU shared by 2 processes; several chunks per
    part."""
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "40000")
    calls = 20
    outcomes = ditron.launch(check_replays_cuda, 2, calls, engine, backend="cuda")
    assert all(sum(seen.values()) == 2 * calls for seen in outcomes), outcomes
    assert outcomes[0].get("replayed", 0) >= calls // 2, outcomes
    assert outcomes[0] != outcomes[1], outcomes  # the ranks' caches differed


class _Stream:
    """Stands in for ``torch.cuda.Stream`` in :func:`check_turns`: records waits."""

    def __init__(self, name: str, waits: list) -> None:
        self.name, self.waits = name, waits

    def __eq__(self, other) -> bool:
        return isinstance(other, _Stream) and other.name == self.name

    def wait_stream(self, other: _Stream) -> None:
        self.waits.append((self.name, other.name))


def check_turns() -> list:
    """``exchange.next_turn`` on the CPU backend with stand-in streams: halves alternate,
    the acknowledgement is implied only after a call on the same inbox, a call on another
    stream waits for the previous one's, and a new inbox (the workspaces released) starts
    over."""
    from ditron.ops import exchange
    from ditron.runtime import stream_order
    from ditron.runtime.world import current

    waits: list = []
    streams = {name: _Stream(name, waits) for name in ("a", "b")}
    use = ["a"]
    # the order of a GPU rank's streams (``runtime/stream_order.py``), queried here
    torch.cuda.current_stream = lambda device=None: streams[use[0]]
    torch._C._cuda_getCurrentRawStream = lambda device: hash(use[0])
    stream_order.capturing = lambda: False
    exchange.StreamOrder = lambda device: stream_order.StreamOrder(torch.device("cuda", 0))
    key, nbytes = "test.turns", 1000
    inbox_key = ("workspace", "inbox", f"{key}:graph2:{exchange._inbox_cap(nbytes)}")
    cache = current().cache
    turns = [exchange.next_turn(key, nbytes)]  # no inbox yet: waits
    cache[inbox_key] = types.SimpleNamespace(tensors=[torch.empty(8)])
    turns.append(exchange.next_turn(key, nbytes))  # the inbox is new: waits
    turns.append(exchange.next_turn(key, nbytes))  # implied
    use[0] = "b"
    turns.append(exchange.next_turn(key, nbytes))  # another stream: waits for a, implied
    cache[inbox_key] = types.SimpleNamespace(tensors=[torch.empty(16)])  # a new inbox
    turns.append(exchange.next_turn(key, nbytes))
    turns.append(exchange.next_turn(key, nbytes))
    return [(t.half, t.implied) for t in turns] + waits


def test_turns_of_replayed_exchanges():
    got = ditron.launch(check_turns, 1, backend="cpu")[0]
    assert got == [(0, False), (1, False), (0, True), (1, True), (0, False), (1, True),
                   ("b", "a")]


def test_replay_policy_captures_each_key_at_most_once():
    from ditron.ops import replays

    # a working set within the cache: seen, captured, then replayed every step
    cache = replays._Cache(max_graphs=4)
    steps = []
    for _ in range(4):
        steps.append([cache.step(k) for k in ("a", "b", "c")])
        for k, what in zip(("a", "b", "c"), steps[-1], strict=True):
            if what == "capture":
                cache.add(k, object())
    assert steps == [["eager"] * 3, ["capture"] * 3, ["replay"] * 3, ["replay"] * 3]
    # a working set larger than the cache, called round robin: no key is captured twice,
    # the graphs kept are replayed, the dropped keys run uncaptured
    cache = replays._Cache(max_graphs=4)
    keys = [f"k{i}" for i in range(7)]
    counts: dict[str, dict[str, int]] = {k: {"eager": 0, "capture": 0, "replay": 0}
                                         for k in keys}
    for _ in range(12):
        for k in keys:
            what = cache.step(k)
            counts[k][what] += 1
            if what == "capture":
                cache.add(k, object())
    assert all(c["capture"] == 1 for c in counts.values()), counts
    assert sum(c["replay"] for c in counts.values()) >= 4 * 9, counts
    assert len(cache.graphs) == 4 and len(cache.dropped) == 3


def test_replay_policy_gives_up_a_key_whose_capture_failed():
    from ditron.ops import replays

    # before: a capture that raised left the key unseen: eager, then the failing capture
    # again, on every second call
    cache = replays._Cache(max_graphs=4)
    assert [cache.step("a"), cache.step("a")] == ["eager", "capture"]
    cache.failed("a")
    assert [cache.step("a") for _ in range(4)] == ["eager"] * 4
    assert [cache.step("b"), cache.step("b")] == ["eager", "capture"]  # other keys as before
