"""ditron.ops collectives against torch.distributed on fresh random data (CPU backend).

Each rank function checks many cases in one launch (launches cost more than checks);
assertion errors travel back through ``ditron.launch`` with the failing rank attached.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.ops.a2a_device import all_to_all_device_pair
from ditron.runtime.world import current

from .poison import poison_empty

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2), torch.float16: (1e-2, 1e-2)}


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    rtol, atol = TOL[expected.dtype]
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert not torch.isnan(actual).any(), f"{what}: unwritten (NaN) elements"
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=what)


def _same(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bit for bit: the ops that only move bytes (gathers, all-to-alls, receives)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert not torch.isnan(actual).any(), f"{what}: unwritten (NaN) elements"
    assert torch.equal(actual, expected), (
        f"{what}: not bit-exact, {int((actual != expected).sum())} elements differ, max "
        f"{(actual.double() - expected.double()).abs().max().item() if actual.numel() else 0}")


def _gen(*key: int) -> torch.Generator:
    return torch.Generator().manual_seed(hash(key) % (2**31))


def _host() -> dist.ProcessGroup:
    return current().host_group  # gloo on every backend: references run on the host


def _gather_fp32(x: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty(x.shape, dtype=torch.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu().contiguous(), group=_host())
    return parts


def _a2a_ref(x: torch.Tensor, ins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(received counts, received rows in fp32) by ``dist.all_to_all_single``."""
    outs = torch.empty(ins.shape, dtype=torch.int64)
    dist.all_to_all_single(outs, ins.clone(), group=_host())
    ref = torch.empty(int(outs.sum()), *x.shape[1:])
    dist.all_to_all_single(ref, x.float(), outs.tolist(), ins.tolist(), group=_host())
    return outs, ref


def _sum_ref(x: torch.Tensor) -> torch.Tensor:
    """The exact sum over ranks (fp32 accumulation of the gathered inputs), in x's dtype."""
    return torch.stack(_gather_fp32(x)).sum(0).to(x.dtype)


def check_ops(engines: tuple[str | None, ...], calls: int = 3, scale: int = 1) -> int:
    """Every collective, each engine, ``calls`` repeated calls rotating through the dtypes.

    Inputs are made on the host and moved to the rank's device; ``scale`` widens them.
    Fresh outputs are NaN-filled, so an element an op never writes fails.
    """
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    ops = _OnDevice(dev)
    checks = 0
    for engine in engines:
        for it in range(calls):
            dtype = DTYPES[it % len(DTYPES)]
            g = _gen(me, it, len(str(engine)))
            # all_gather, dim 0 and a non-contiguous input gathered along dim 1
            x = torch.randn(3, 5 * scale, generator=g).to(dtype)
            ref = torch.cat([p.to(dtype) for p in _gather_fp32(x)], 0)
            _same(ops.all_gather(x, 0, engine=engine), ref, f"all_gather {engine} {dtype}")
            xt = torch.randn(4, 2 + it, generator=g).to(dtype).t()
            ref = torch.cat([p.to(dtype) for p in _gather_fp32(xt)], 1)
            _same(ops.all_gather(xt, -1, engine=engine), ref, f"all_gather dim1 {engine}")
            # reduce_scatter along dim 0 and (non-contiguous) dim 1
            x = torch.randn(2 * w, 3 * scale, generator=g).to(dtype)
            _close(ops.reduce_scatter(x, 0, engine=engine), _sum_ref(x).chunk(w, 0)[me],
                   f"reduce_scatter {engine} {dtype}")
            xt = torch.randn(3 * w, 4, generator=g).to(dtype).t()
            _close(ops.reduce_scatter(xt, 1, engine=engine), _sum_ref(xt).chunk(w, 1)[me],
                   f"reduce_scatter dim1 {engine} {dtype}")
            # all_reduce: both methods, a size that does not divide by w, and auto
            x = torch.randn(7, 3 * scale, generator=g).to(dtype)
            ref = _sum_ref(x)
            for method in ("one_shot", "two_shot", "auto"):
                _close(ops.all_reduce(x, method, engine=engine), ref,
                       f"all_reduce {method} {engine} {dtype}")
            # all_to_all with uneven and zero splits, against all_to_all_single
            ins = torch.randint(0, 4, (w,), generator=g)
            ins[(me + it) % w] = 0
            x = torch.randn(int(ins.sum()), 2, 3 * scale, generator=g)
            outs, ref = _a2a_ref(x, ins)
            got = ops.all_to_all(x.to(dtype), ins.tolist(), outs.tolist(), engine=engine)
            _same(got, ref.to(dtype), f"all_to_all {engine} {dtype}")
            # all_to_all with even splits (no split lists: no host exchange of sizes)
            x = torch.randn(2 * w, 3, generator=g)
            outs, ref = _a2a_ref(x, torch.full((w,), 2))
            _same(ops.all_to_all(x.to(dtype), engine=engine), ref.to(dtype),
                   f"all_to_all even {engine} {dtype}")
            checks += 9
    return checks


class _OnDevice:
    """``ditron.ops`` with tensor arguments moved to ``device`` and results moved back."""

    def __init__(self, device: torch.device):
        self.device = device

    def __getattr__(self, name: str):
        op = getattr(ditron.ops, name)

        def call(*args, **kw):
            args = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args]
            return op(*args, **kw).cpu()

        return call


def check_all_to_all_device(calls: int = 3) -> int:
    """``calls`` calls: the 3 dtypes, then fp32 again (its workspace's two halves are then
    reused), and last a capacity too small for what arrives (rows beyond it are dropped,
    the counts stay true)."""
    w, me = ditron.world().world_size, ditron.world().rank
    checks = 0
    for it in range(calls):
        g = _gen(me, it, 7)
        ins = torch.randint(0, 4, (w,), generator=g)
        if it % 2:  # a zero split (not on every call: at W = 1 it is the only one)
            ins[(me + it) % w] = 0
        x = torch.randn(int(ins.sum()), 5, generator=g).to(DTYPES[it % 3] if it < 3
                                                             else torch.float32)
        outs, ref = _a2a_ref(x, ins)
        dev = ditron.world().device
        splits = ins.to(dev) * 2 // 2  # a device tensor computed at run time
        cap = 2 if it == calls - 1 and calls > 3 else 4 * w
        out, out_splits = ditron.ops.all_to_all_device(x.to(dev), splits, cap)
        out, out_splits = out.cpu(), out_splits.cpu()
        assert out.shape == (cap, 5)
        assert torch.equal(out_splits, outs), (out_splits, outs)
        kept = min(int(outs.sum()), cap)
        _same(out[:kept], ref[:kept].to(x.dtype), "all_to_all_device")
        checks += 1
    return checks


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setenv("DITRON_POISON", "1")  # fresh workspaces read as NaN


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 8])
def test_collectives_match_torch(world_size):
    engines = ("copy_engine", "sm") + (("tma",) if world_size in (2, 3) else ())
    counts = ditron.launch(check_ops, world_size, engines, backend="cpu")
    assert all(c == 9 * 3 * len(engines) for c in counts)


def _rank_on_gpu_host() -> int:
    """A CPU-backend rank on a host with GPUs: forked from a process that may have
    initialised CUDA, so any call into the CUDA runtime would fail ("initialization
    error"). Pretend GPUs are there and make the runtime calls raise; every op must still
    run (and match torch) without touching them."""
    import torch.cuda

    def touched(*args, **kw):
        raise AssertionError("a CPU-backend op called into the CUDA runtime")

    names = ("is_available", "is_current_stream_capturing", "current_stream", "current_device",
             "synchronize", "set_device", "Stream", "Event")
    real = {name: getattr(torch.cuda, name) for name in names}
    for name in names[1:]:
        setattr(torch.cuda, name, touched)
    torch.cuda.is_available = lambda: True
    w, me = ditron.world().world_size, ditron.world().rank
    checks = 0
    try:
        for it in range(2):
            g = _gen(me, it, 313)
            x = torch.randn(2 * w, 3 + it, generator=g)
            parts = _gather_fp32(x)
            for engine in ("copy_engine", "sm"):
                _same(ditron.ops.all_gather(x, engine=engine), torch.cat(parts), "all_gather")
                _close(ditron.ops.reduce_scatter(x, engine=engine),
                       sum(parts).chunk(w)[me], "reduce_scatter")
                _close(ditron.ops.all_reduce(x, engine=engine), sum(parts), "all_reduce")
                checks += 3
            k = 4 * w
            a, b = torch.randn(6 * w, k // w, generator=g), torch.randn(k // w, 5, generator=g)
            full = sum(p.view(6 * w, -1) for p in _gather_fp32(a @ b))
            _close(ditron.ops.gemm_rs(a, b, method="overlap"), full.chunk(w)[me], "gemm_rs")
            _close(ditron.ops.gemm_ar(a, b, method="overlap"), full, "gemm_ar")
            checks += 2
    finally:
        for name, fn in real.items():
            setattr(torch.cuda, name, fn)
    return checks


def test_cpu_backend_on_a_gpu_host_leaves_cuda_alone():
    assert ditron.launch(_rank_on_gpu_host, 2, backend="cpu") == [16, 16]


def test_network_engine_forced():
    counts = ditron.launch(check_ops, 3, ("network",), backend="cpu")
    assert all(c == 27 for c in counts)


@pytest.mark.parametrize("engine", ["copy_engine", "sm"])
def test_two_simulated_nodes(monkeypatch, engine):
    """Two nodes of two ranks: node peers use ``engine``, the others the network engine."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    counts = ditron.launch(check_ops, 4, (engine,), backend="cpu")
    assert all(c == 27 for c in counts)


def check_chunked_exchanges(calls: int = 5, graph: bool = False) -> int:
    """The copy engine's all-gather (pulls or pushes) and reduce-scatter / two-shot
    all-reduce (pushes) in 1-8 chunks per part (tiny chunks forced by the env), sizes and so
    chunk counts changing from call to call, uneven chunk bounds, the all-gather's pulls
    over one to three of the copy engine's lanes, its first chunks tapered or not, the
    pushes over one or two lanes, their signals on a lane of their own or not. ``graph``:
    all-gather and reduce-scatter take their graph-safe variants (inside
    ``ditron.ops.graph_safe()``, device epochs; one inbox or two halves taking turns,
    ``exchange.GRAPH_HALVES``), between eager all-reduces on the same engine; in most
    iterations as if captured in one CUDA graph (a fixed capture id), so that with two
    halves every call after the first on an inbox writes without an acknowledgement wait
    (``exchange.ACK_BY_DATA``)."""
    import contextlib

    from ditron.ops import chunked_exchanges, exchange
    from ditron.ops.chunked_exchanges import chunk_bounds

    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    ops = _OnDevice(ditron.world().device)
    checks = 0
    for it in range(calls):
        chunked_exchanges.PULL_LANES = 1 + it % 3  # the all-gather's pulls on one to three lanes
        # its first chunks small, of one size, or as the size and mode choose
        chunked_exchanges.PULL_TAPER = (True, False, None)[it % 3]
        # graph-safe: one inbox, or two taking turns (each setting with its own pad)
        exchange.GRAPH_HALVES = (2, 2, 1, 2, 2)[it % 5]
        # the all-gather by pulls or by pushes (with one inbox and with two halves)
        chunked_exchanges.GATHER_BY = ("pull", "push", "push", None, "push")[it % 5]
        chunked_exchanges.PUSH_LANES = 1 + it % 2  # pushes on one or two of the engine's streams
        chunked_exchanges.PUSH_SIGNAL_LANE = it % 3 != 2  # their signals on a stream of their own
        dtype = DTYPES[it % len(DTYPES)]
        g = _gen(me, it, 77)
        x = torch.randn(3 + it, 7 + 5 * it, generator=g).to(dtype)
        head = chunk_bounds(x.numel(), x.element_size(), chunked_exchanges.PULL_TAPER, head=True)
        assert len(head) > 1
        if chunked_exchanges.PULL_TAPER:  # the first chunk is the smallest
            assert head[0][1] - head[0][0] < head[-1][1] - head[-1][0]
        ref = torch.cat([p.to(dtype) for p in _gather_fp32(x)], 0)
        xr = torch.randn(2 * w, 9 + 4 * it, generator=g).to(dtype)
        assert len(chunk_bounds(xr.numel() // w, xr.element_size(), taper=True)) > 2
        # a fixed capture id (as if these calls were captured in one graph), or none
        exchange.capture_id = (lambda: 7) if it % 4 else (lambda: None)
        with ditron.ops.graph_safe() if graph else contextlib.nullcontext():
            _same(ops.all_gather(x, 0, engine="copy_engine"), ref, f"chunked all_gather {it}")
            _close(ops.reduce_scatter(xr, 0, engine="copy_engine"),
                   _sum_ref(xr).chunk(w, 0)[me], f"chunked reduce_scatter {it}")
        x = torch.randn(5, 11 + it, generator=g).to(dtype)
        _close(ops.all_reduce(x, "two_shot", engine="copy_engine"), _sum_ref(x),
               f"chunked all_reduce {it}")
        checks += 3
    if graph:
        # a larger size class gets an inbox of its own: the smaller one, which a captured
        # graph would still point at, is neither freed nor moved
        exchange.GRAPH_HALVES = 1
        before = _graph_inboxes()
        big = torch.randn(w, 1 << 14, generator=_gen(me, 99, 77))
        with ditron.ops.graph_safe():
            _close(ops.reduce_scatter(big, 0, engine="copy_engine"),
                   _sum_ref(big).chunk(w, 0)[me], "graph-safe reduce_scatter, larger class")
            _close(ops.reduce_scatter(xr, 0, engine="copy_engine"),
                   _sum_ref(xr).chunk(w, 0)[me], "graph-safe reduce_scatter after it")
        after = _graph_inboxes()
        assert len(after) > len(before) and all(after[k] == p for k, p in before.items())
        checks += 2
    return checks


def _graph_inboxes() -> dict:
    """The graph-safe exchanges' inboxes (both settings of ``GRAPH_HALVES``): cache key ->
    address."""
    from ditron.runtime.world import current

    return {k: ws.tensors[0].data_ptr() for k, ws in current().cache.items()
            if isinstance(k, tuple) and k[:2] == ("workspace", "inbox") and ":graph" in k[2]}


def _sizes(bounds: list[tuple[int, int]], n: int) -> list[int]:
    """Chunk sizes of ``bounds``, checked to tile ``[0, n)`` in order."""
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(hi == lo for (_, hi), (lo, _) in zip(bounds, bounds[1:], strict=False))
    return [hi - lo for lo, hi in bounds]


def test_chunk_bounds(monkeypatch):
    from ditron.ops.chunked_exchanges import PULL_MAX_CHUNKS, chunk_bounds

    mb = 1 << 20
    monkeypatch.delenv("DITRON_PULL_CHUNK_BYTES", raising=False)
    monkeypatch.delenv("DITRON_CHUNK_TAPER", raising=False)
    # 128 MB of bf16: chunks of about 64 MB, or 36, 12 and 4 MB ones at the end
    assert _sizes(chunk_bounds(64 * mb, 2), 64 * mb) == [32 * mb, 32 * mb]
    tapered = _sizes(chunk_bounds(64 * mb, 2, taper=True), 64 * mb)
    assert [s * 2 // mb for s in tapered] == [76, 36, 12, 4]
    assert _sizes(chunk_bounds(64 * mb, 2, taper=True, head=True), 64 * mb) == tapered[::-1]
    # a part of less than one chunk tapers from a lower bound; head: small chunks first
    assert _sizes(chunk_bounds(48 * mb, 1, taper=True, head=True, min_bytes=32 * mb),
                  48 * mb) == [4 * mb, 12 * mb, 32 * mb]
    # a large part: the taper stays, the body's chunks grow to stay within the cap
    big = _sizes(chunk_bounds(512 * mb, 1, taper=True), 512 * mb)
    assert len(big) == PULL_MAX_CHUNKS and big[-3:] == [36 * mb, 12 * mb, 4 * mb]
    assert len(set(big[:-3])) == 1 and big[0] > 64 * mb
    assert len(chunk_bounds(1 << 40, 1)) == PULL_MAX_CHUNKS
    # below TAPER_MIN_BYTES, or with the taper off: chunks of one size
    assert _sizes(chunk_bounds(48 * mb, 1, taper=True), 48 * mb) == [48 * mb]
    assert _sizes(chunk_bounds(0, 4, taper=True), 0) == [0]
    monkeypatch.setenv("DITRON_CHUNK_TAPER", "1")
    assert _sizes(chunk_bounds(128 * mb, 1, taper=True), 128 * mb) == [64 * mb, 64 * mb]
    for bad in ("three", "-2"):  # a negative factor was taken as "no taper"
        monkeypatch.setenv("DITRON_CHUNK_TAPER", bad)
        with pytest.raises(ValueError, match="DITRON_CHUNK_TAPER must be an integer >= 0"):
            chunk_bounds(128 * mb, 1, taper=True)
    # tiny chunks forced by the env (the CPU tests' setting): the taper still forms
    monkeypatch.delenv("DITRON_CHUNK_TAPER")
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "24")
    assert _sizes(chunk_bounds(21, 4, taper=True), 21) == [8, 9, 3, 1]


def check_graph_halves() -> bool:
    """With two halves, successive calls of one size take turns over the halves; with one,
    every call uses one inbox. Each call acknowledges the ones before it as it starts
    (``ack[me] = E - 1`` on the peers); writes wait for ``ack >= E - 1`` unless implied."""
    from ditron.ops import exchange
    from ditron.runtime.signals import host_value

    exchange.GRAPH_HALVES = 2
    g = [exchange.graph_pad("test_halves", torch.float32, 100) for _ in range(3)]
    ptrs = [x.inbox.data_ptr() for x in g]
    assert ptrs[0] != ptrs[1] and ptrs[2] == ptrs[0]
    assert host_value(g[2].epoch) == 3  # one device epoch, bumped by each call
    assert not any(x.implied for x in g)  # not captured: every call waits
    # captured: the first call of a capture on an inbox waits, the later ones of the same
    # capture do not; a new capture starts over, and so does another size's inbox
    implied = []
    for graph, numel in ((5, 100), (5, 100), (5, 100), (6, 100), (6, 5000), (6, 100),
                         (None, 100), (6, 100)):
        exchange.capture_id = lambda graph=graph: graph
        implied.append(exchange.graph_pad("test_halves", torch.float32, numel).implied)
    assert implied == [False, True, True, False, False, True, False, False]
    exchange.ACK_BY_DATA = False
    assert not exchange.graph_pad("test_halves", torch.float32, 100).implied
    exchange.ACK_BY_DATA = True
    exchange.GRAPH_HALVES = 1
    one = [exchange.graph_pad("test_halves", torch.float32, 100) for _ in range(2)]
    assert one[0].inbox.data_ptr() == one[1].inbox.data_ptr() not in ptrs
    assert not one[1].implied  # one inbox: always the wait
    return True


def check_start_acks() -> bool:
    """A graph-safe call acknowledges every earlier call of its pad on every node peer as
    it starts (``ack[me]`` there becomes ``E - 1``), and its writes wait for the peers'
    ``ack >= E - 1``."""
    from ditron.ops import exchange
    from ditron.runtime.signals import host_value

    w, me = ditron.world().world_size, ditron.world().rank
    exchange.GRAPH_HALVES = 1
    for it in range(3):
        g = exchange.graph_pad("test_acks", torch.float32, 64)
        x = exchange.Chunked(g.inbox, range(w), g.pad, True, g.epoch, g.ack)
        epoch = host_value(g.epoch)
        assert epoch == it + 1
        sig = x.after((me + 1) % w)
        assert sig.index == g.ack + (me + 1) % w and host_value(sig.value) == epoch - 1
        ditron.barrier()  # every rank has started this call
        acks = g.pad.signals[g.ack:g.ack + w].tolist()
        assert acks == [0 if q == me else epoch - 1 for q in range(w)], acks
        ditron.barrier()
    return True


def check_slow_reader(halves: int, calls: int = 4) -> int:
    """Graph-safe pushes as if captured in one graph while the last rank copies every chunk
    out late. Two halves: no acknowledgement waits after the first call
    (``exchange.ACK_BY_DATA``), the others run one call ahead into the other half of its
    inbox, never over data it still has to read; one: they wait for its acknowledgement."""
    import time

    from ditron.ops import chunked_exchanges, exchange

    w, me = ditron.world().world_size, ditron.world().rank
    if me == w - 1:
        wait = exchange.Chunked.wait

        def slow(self, i: int) -> None:
            wait(self, i)
            time.sleep(0.02)

        exchange.Chunked.wait = slow
    exchange.capture_id = lambda: 7
    chunked_exchanges.GATHER_BY = "push"
    exchange.GRAPH_HALVES = halves
    checks = 0
    with ditron.ops.graph_safe():  # calls of one op back to back, so ranks can run ahead
        outs = []
        for it in range(calls):
            x = torch.randn(4, 9, generator=_gen(me, it, 31))
            outs.append((ditron.ops.all_gather(x, 0, engine="copy_engine"), x))
        for it, (out, x) in enumerate(outs):
            _same(out, torch.cat(_gather_fp32(x), 0), f"all_gather {it}, slow reader")
        outs = []
        for it in range(calls):
            xr = torch.randn(2 * w, 9, generator=_gen(me, it, 32))
            outs.append((ditron.ops.reduce_scatter(xr, 0, engine="copy_engine"), xr))
        for it, (out, xr) in enumerate(outs):
            _close(out, _sum_ref(xr).chunk(w, 0)[me], f"reduce_scatter {it}, slow reader")
        checks += 2 * calls
    return checks


@pytest.mark.parametrize("halves", [1, 2])
@pytest.mark.parametrize("world_size", [2, 3])
def test_slow_reader(monkeypatch, world_size, halves):
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "24")
    counts = ditron.launch(check_slow_reader, world_size, halves, backend="cpu")
    assert counts == [8] * world_size


def test_gather_by_checked(monkeypatch):
    from ditron.ops import chunked_exchanges

    monkeypatch.setattr(chunked_exchanges, "GATHER_BY", "pulls")
    with pytest.raises(ValueError, match=r"GATHER_BY \(DITRON_GATHER_BY\) must be 'pull', "
                                         r"'push' or None"):
        chunked_exchanges.gather_on_node("test", torch.zeros(4), torch.zeros(2, 4), "copy_engine")



def check_bad_gather_by_refused_before_moving(seed: int) -> int:
    from ditron import ops
    from ditron.ops import chunked_exchanges, collectives

    moved = []
    rs = collectives._reduce_scatter_flat
    collectives._reduce_scatter_flat = lambda *a, **k: moved.append(1) or rs(*a, **k)
    me = current().world.rank
    try:
        for _ in range(2):  # and again: the refused calls left no signal behind
            chunked_exchanges.GATHER_BY = "pulls"
            for call in (lambda x: ops.all_reduce(x, "two_shot", engine="copy_engine"),
                         lambda x: ops.all_gather(x, engine="copy_engine")):
                try:
                    call(torch.randn(37))
                except ValueError as e:
                    assert "DITRON_GATHER_BY" in str(e), e
                else:
                    raise AssertionError("a bad GATHER_BY was not refused")
            assert moved == [], "the reduce-scatter half ran before the refusal"
            chunked_exchanges.GATHER_BY = None
            x = torch.randn(37, generator=torch.Generator().manual_seed(seed + me))
            _close(ops.all_reduce(x, "two_shot", engine="copy_engine"), _sum_ref(x),
                   "all_reduce after the refusal")
            _same(ops.all_gather(x, engine="copy_engine"), torch.cat(_gather_fp32(x)),
                  "all_gather after the refusal")
            moved.clear()
    finally:
        collectives._reduce_scatter_flat = rs
        chunked_exchanges.GATHER_BY = None
    return 1


def test_bad_gather_by_refused_before_anything_moves():
    """A bad ``DITRON_GATHER_BY`` stops a two-shot all-reduce before its reduce-scatter
    half (not between the halves) and an all-gather before it moves; calls after it work."""
    assert ditron.launch(check_bad_gather_by_refused_before_moving, 2, 71,
                         backend="cpu") == [1, 1]


class _Recorder:
    """An engine stand-in that records what each ``issue`` got."""

    def __init__(self):
        self.batches: list[list] = []
        self.since: list = []

    def issue(self, transfers, since=None):
        self.batches.append(list(transfers))
        self.since.append(since)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph_safe"])
def test_push_lanes(monkeypatch, graph):
    """Graph-safe pushes take turns over ``PUSH_LANES`` streams (one ``issue`` per chunk, the
    first chunk on each stream waiting for the acknowledgement), their signals on a lane of
    their own where ``PUSH_SIGNAL_LANE`` says; eager pushes stay in one ``issue`` (one
    stream), which keeps a peer's growing ready values in order."""
    import types

    from ditron.engines.base import Transfer
    from ditron.ops import chunked_exchanges

    made = []

    def instance(name, **options):
        made.append(options)
        return _Recorder()

    monkeypatch.setattr(chunked_exchanges, "engine_instance", instance)
    monkeypatch.setattr(chunked_exchanges, "PUSH_LANES", 2)
    x = types.SimpleNamespace(graph=graph, waits=graph,
                              after=lambda q: ("ack", q) if graph else None)
    t = torch.zeros(4)
    chunks = [[Transfer(t, t, 0, q) for q in (1, 2)] for _ in range(3)]
    for signal_lane in (True, False):
        made.clear()
        monkeypatch.setattr(chunked_exchanges, "PUSH_SIGNAL_LANE", signal_lane)
        eng = chunked_exchanges._push_chunks(x, "copy_engine", chunks, "mark")
        flat = [tr for batch in eng.batches for tr in batch]
        assert len(flat) == 6 and [tr.dst_rank for tr in flat] == [1, 2] * 3
        assert eng.since == [None] * len(eng.batches)  # pushes that wait follow the bump
        if graph:
            expected = {"lanes": 2, "signal_lane": True} if signal_lane else {"lanes": 2}
            assert made == [expected] and len(eng.batches) == 3
            assert [tr.after for tr in flat] == [("ack", 1), ("ack", 2)] * 2 + [None] * 2
            # implied acknowledgements: no waits; the pushes start at the early mark when
            # their signals (which need the bump) run on a lane of their own
            x.waits, x.after = False, lambda q: None
            eng = chunked_exchanges._push_chunks(x, "copy_engine", chunks, "mark")
            assert all(tr.after is None for batch in eng.batches for tr in batch)
            assert eng.since == ["mark" if signal_lane else None] * 3
            x.waits, x.after = True, lambda q: ("ack", q)
        else:
            assert made == [{}] and len(eng.batches) == 1
            assert all(tr.after is None for tr in flat)


def test_graph_halves(monkeypatch):
    assert ditron.launch(check_graph_halves, 1, backend="cpu") == [True]
    assert ditron.launch(check_start_acks, 3, backend="cpu") == [True] * 3
    from ditron.ops import exchange

    monkeypatch.setattr(exchange, "GRAPH_HALVES", 3)
    with pytest.raises(ValueError, match=r"GRAPH_HALVES \(DITRON_GRAPH_HALVES\) must be 1 or 2"):
        exchange.graph_pad("test", torch.float32, 8)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph_safe"])
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_chunked_exchanges(monkeypatch, world_size, graph):
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "24")
    counts = ditron.launch(check_chunked_exchanges, world_size, 5, graph, backend="cpu")
    assert counts == [17 if graph else 15] * world_size


def check_engine_choice() -> tuple[str, str, str]:
    from ditron.ops import collectives

    return (collectives._engine("all_gather", None, 64),
            collectives._engine("all_reduce", None, 64),
            collectives._engine("all_reduce", "copy_engine", 64))


def test_auto_engine_rules():
    """``"auto"`` on GPU (a pure function): the fused kernels below the op's limit per peer
    eagerly, below ``FUSED_GRAPH_MAX_BYTES`` under graphs for the ops whose copy-engine
    exchange is graph-safe, below ``REPLAY_FUSED_MAX_BYTES`` for replayed calls; always the
    fused path under graphs for the others."""
    from ditron.ops import collectives as c

    mb = 1 << 20
    pick = c._auto_engine
    assert c.FUSED_GRAPH_MAX_BYTES < c.FUSED_AG_MAX_BYTES
    # eager: the all-gather below 48 MB per peer, the reduce-scatter below 64 MB
    assert pick("all_gather", 40 * mb, True, False, 1) == "sm"
    assert pick("all_gather", 48 * mb, True, False, 1) == "copy_engine"
    assert pick("reduce_scatter", 48 * mb, True, False, 1) == "sm"
    assert pick("reduce_scatter", 64 * mb, True, False, 1) == "copy_engine"
    for op in ("all_gather", "reduce_scatter"):
        assert pick(op, 16 * mb, True, True, 1) == "sm"
        assert pick(op, 32 * mb, True, True, 1) == "copy_engine"  # graphs: from 32 MB
        assert pick(op, 48 * mb, True, True, 1) == "copy_engine"
        assert pick(op, 48 * mb, True, True, 2) == "sm"  # several nodes: no graph-safe CE
    assert pick("all_to_all", 48 * mb, True, True, 1) == "sm"
    assert pick("all_to_all", 64 * mb, True, False, 1) == "copy_engine"
    assert pick("all_reduce", 1 << 30, True, True, 1) == "sm"
    assert pick("all_to_all", 512 << 10, False, False, 1) == "sm"  # uneven splits
    assert pick("all_to_all", 2 * mb, False, False, 1) == "copy_engine"
    # replayed graphs (a given out): the all-gather's fused kernel below 48 MB per peer,
    # the reduce-scatter's below 32 MB
    assert pick("all_gather", 40 * mb, True, False, 1, replay=True) == "sm"
    assert pick("all_gather", 48 * mb, True, False, 1, replay=True) == "copy_engine"
    assert pick("reduce_scatter", 16 * mb, True, False, 1, replay=True) == "sm"
    assert pick("reduce_scatter", 32 * mb, True, False, 1, replay=True) == "copy_engine"


def test_env_override_selects_engine(monkeypatch):
    monkeypatch.setenv("DITRON_ENGINE", "sm")
    monkeypatch.setenv("DITRON_ALL_GATHER_ENGINE", "network")
    chosen = ditron.launch(check_engine_choice, 1, backend="cpu")
    assert chosen == [("network", "sm", "copy_engine")]
    counts = ditron.launch(check_ops, 2, (None,), 3, backend="cpu")
    assert all(c == 27 for c in counts)


@pytest.mark.parametrize("world_size", [1, 3, 4, 8])
def test_all_to_all_device_splits(world_size):
    # the fp32 workspace serves 4 calls (both halves of its device-epoch double buffer twice)
    counts = ditron.launch(check_all_to_all_device, world_size, 7, backend="cpu")
    assert all(c == 7 for c in counts)


def check_all_to_all_device_indexed(calls: int = 6,
                                    tile: tuple[int, int] | None = None) -> int:
    """``send_index`` / ``recv_index`` against ``x[send_index]`` sent by
    ``dist.all_to_all_single`` and then indexed by ``recv_index``: rows of ``x`` sent twice
    or never, an index longer than the splits use, ``recv_index`` with negative, too large
    and repeated entries; both, either one alone (calls rotate), four dtypes (int16 rows
    travel widened), int32 and int64 indices, and a capacity that drops rows last; every
    other call weights the rows with ``send_scale`` (fp32 or bf16 values, negative ones
    too), against the rows scaled in fp32 and rounded once; calls 1 and 2 ask for
    ``zero_missing`` (the rows left undefined otherwise, poisoned, must come back zero).
    ``tile``: the copy tiles' ``(bytes, columns)`` on this backend (small ones cut the
    20-element rows into partial tiles of rows and of columns)."""
    from ditron.ops import a2a_device

    if tile is not None:
        backend = ditron.world().backend
        a2a_device.TILE_BYTES[backend], a2a_device.TILE_COLS[backend] = tile
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    for it in range(calls):
        g = _gen(me, it, 13)
        dtype = (*DTYPES, torch.int16)[it % 4]
        ins = torch.randint(0, 5, (w,), generator=g)
        if it % 2:  # a zero split (not on every call: at W = 1 it is the only one)
            ins[(me + it) % w] = 0
        s = int(ins.sum())
        if it % 3 == 2:  # recv_index alone: x holds the rows sent
            x = torch.randn(s, 5, 4, generator=g).mul(100).to(dtype)
            sent = x
        else:
            x = torch.randn(3 + it, 5, 4, generator=g).mul(100).to(dtype)
            send_index = torch.randint(0, x.shape[0], (s + 2,), generator=g)
            sent = x[send_index[:s]]
        kw = {}
        if it % 2 == 0:
            scale = (torch.rand(x.shape[0] if it % 3 == 2 else s + 2, generator=g) * 3 - 1
                     ).to(torch.bfloat16 if it % 4 else torch.float32)
            kw["send_scale"] = scale.to(dev)
            sent = (sent.float() * scale[:s].float()[:, None, None]).to(dtype)
        outs, ref = _a2a_ref(sent.float(), ins)
        cap = 3 if it == calls - 1 else 4 * w
        kept = min(int(outs.sum()), cap)
        recv_index = torch.randint(-2, cap + 2, (cap,), generator=g)
        if it % 3 != 2:
            kw["send_index"] = send_index.to(dev, torch.int32 if it % 2 else torch.int64)
        if it % 3 != 1:
            kw["recv_index"] = recv_index.to(dev)
        if it in (1, 2):
            kw["zero_missing"] = True
        out, out_splits = ditron.ops.all_to_all_device(x.to(dev), ins.to(dev), cap, **kw)
        out, out_splits = out.cpu(), out_splits.cpu()
        assert out.shape == (cap, 5, 4) and out.dtype == dtype
        assert torch.equal(out_splits, outs), (out_splits, outs)
        if "recv_index" in kw:
            valid = (recv_index >= 0) & (recv_index < kept)
            got, want = out[valid], ref[recv_index[valid]].to(dtype)
            missing = out[~valid]
        else:
            got, want = out[:kept], ref[:kept].to(dtype)
            missing = out[kept:]
        if kw.get("zero_missing"):
            assert torch.equal(missing, torch.zeros_like(missing)), f"call {it}: not zero"
        what = f"all_to_all_device indexed call {it} {sorted(kw)} {dtype}"
        if dtype.is_floating_point:
            _same(got, want, what)
        else:
            assert torch.equal(got, want), what
    x = torch.randn(4, 3, device=dev)
    splits = torch.zeros(w, dtype=torch.int64, device=dev)
    for words, kw in [("send_index must be an integer vector",
                       {"send_index": torch.zeros(2, device=dev)}),
                      (rf"recv_index must be an integer \[{w}\]",
                       {"recv_index": torch.zeros(w + 1, dtype=torch.int64, device=dev)}),
                      (r"send_scale must be a floating \[4\] vector",
                       {"send_scale": torch.ones(3, device=dev)}),
                      (r"send_scale must be a floating \[2\] vector",
                       {"send_scale": torch.ones(4, device=dev),
                        "send_index": torch.zeros(2, dtype=torch.int64, device=dev)}),
                      ("send_scale must be a floating", {"send_scale": torch.ones(
                          4, dtype=torch.int64, device=dev)})]:
        with pytest.raises(ValueError, match=words):
            ditron.ops.all_to_all_device(x, splits, w, **kw)
    with pytest.raises(ValueError, match="send_scale weights rows of .* got x of torch.int32"):
        ditron.ops.all_to_all_device(x.int(), splits, w, send_scale=torch.ones(4, device=dev))
    if current().wait_timeout > 0:  # debug mode: the send index is read and checked
        with pytest.raises(ValueError, match=rf"rank {me}: send_index holds 0..4, outside"):
            ditron.ops.all_to_all_device(x, splits, w, send_index=torch.arange(5, device=dev))
    return calls


def check_all_to_all_device_pair(calls: int = 5) -> int:
    """``all_to_all_device_pair``: companion rows of another dtype and row shape (fp32 rows
    of 3, moved as int32; int8 rows of 5 x 2, moved as int16; fp8 rows of 16, moved as
    int64) arrive bit for bit wherever their ``x`` rows go, against both sent by
    ``dist.all_to_all_single``: with ``send_index`` and ``recv_index`` (calls rotate through
    both, either, neither), ``zero_missing`` on calls 1 and 3 (poisoned rows must come back
    zero in both outputs) and a capacity that drops rows on the last call."""
    poison_empty()
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    extras = [((3,), torch.float32), ((5, 2), torch.int8), ((16,), torch.float8_e4m3fn)]
    for it in range(calls):
        g = _gen(me, it, 29)
        ins = torch.randint(0, 5, (w,), generator=g)
        if it % 2:  # a zero split; at W = 2 the one to myself, so rows cross
            ins[(me + it + 1) % w] = 0
        s = int(ins.sum())
        n = s + 3
        x = torch.randn(n, 6, generator=g).mul(10).to(torch.bfloat16)
        shape, edtype = extras[it % 3]
        extra = torch.randint(-100, 100, (n, *shape), generator=g).to(edtype)
        send_index = torch.randint(0, n, (s,), generator=g) if it % 2 == 0 else None
        pick = send_index if send_index is not None else torch.arange(s)
        outs, ref = _a2a_ref(x[pick].float(), ins)
        _, eref = _a2a_ref(extra[pick].float(), ins)
        cap = 2 if it == calls - 1 else 4 * w
        kept = min(int(outs.sum()), cap)
        recv_index = torch.randint(-2, cap + 2, (cap,), generator=g) if it in (0, 1, 4) \
            else None
        zero = it in (1, 3)
        out, eout, out_splits = all_to_all_device_pair(
            x.to(dev), extra.to(dev), ins.to(dev), cap,
            send_index=None if send_index is None else send_index.to(dev),
            recv_index=None if recv_index is None else recv_index.to(dev), zero_missing=zero)
        out, eout = out.cpu(), eout.cpu()
        assert eout.shape == (cap, *shape) and eout.dtype == edtype
        assert torch.equal(out_splits.cpu(), outs)
        if recv_index is not None:
            came = (recv_index >= 0) & (recv_index < kept)
            src = recv_index[came]
        else:
            came = torch.arange(cap) < kept
            src = torch.arange(kept)
        what = f"all_to_all_device_pair call {it}"
        _same(out[came], ref[src].to(torch.bfloat16), what)
        assert torch.equal(eout[came].float(), eref[src]), f"{what}: companion rows differ"
        if zero:
            assert not out[~came].float().any() and not eout[~came].float().any(), what
    x = torch.randn(4, 3, device=dev)
    splits = torch.zeros(w, dtype=torch.int64, device=dev)
    with pytest.raises(ValueError, match=r"extra must be a \[4, \.\.\.\] tensor"):
        all_to_all_device_pair(x, torch.zeros(3, 2, device=dev), splits, w)
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_all_to_all_device_pair(world_size, backend):
    counts = ditron.launch(check_all_to_all_device_pair, world_size, backend=backend)
    assert counts == [5] * world_size


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_all_to_all_device_fused_gathers(world_size):
    counts = ditron.launch(check_all_to_all_device_indexed, world_size, backend="cpu")
    assert counts == [6] * world_size


@pytest.mark.parametrize("world_size", [1, 3])
def test_all_to_all_device_fused_gathers_in_small_tiles(world_size):
    # 64-byte tiles of at most 8 columns: fp32 rows of 20 in 2-row tiles of 8, 8 and 4
    counts = ditron.launch(check_all_to_all_device_indexed, world_size, 6, (64, 8),
                           backend="cpu")
    assert counts == [6] * world_size


def test_all_to_all_device_send_index_checked_in_debug_mode(monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "60")
    assert ditron.launch(check_all_to_all_device_indexed, 2, 3, backend="cpu") == [3, 3]


def check_all_to_all_inbox(calls: int = 6) -> int:
    """``all_to_all_inbox`` against ``dist.all_to_all_single`` of ``x[send_index]``: the
    peers' rows read where they lie (``first + sum(splits[:q])`` on), ``splits`` as
    ``all_to_all_device``'s ``out_splits``; three dtypes (int16 rows travel widened), a
    capacity that drops the last rows of some calls; every third call is an
    ``all_to_all_device`` of the same signature (one workspace), so the inbox calls see both
    halves of it. Across nodes the rows come in a tensor of their own, from row 0, and the
    inbox holds nothing back."""
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    cap = 3 * w
    nodes = current().topo.num_nodes > 1
    halves = set()
    for it in range(calls):
        g = _gen(me, it, 17)
        dtype = (torch.float32, torch.bfloat16, torch.int16)[it % 3]
        ins = torch.randint(0, 5, (w,), generator=g)
        x = torch.randn(6, 5, 4, generator=g).mul(100).to(dtype)
        send_index = torch.randint(0, 6, (int(ins.sum()),), generator=g)
        outs, ref = _a2a_ref(x[send_index].float(), ins)
        kept = min(int(outs.sum()), cap)
        args = (x.to(dev), ins.to(dev), cap)
        if it % 3 == 2:
            out, _ = ditron.ops.all_to_all_device(*args, send_index=send_index.to(dev))
            assert torch.equal(out[:kept].cpu(), ref[:kept].to(dtype))
            continue
        with ditron.ops.all_to_all_inbox(*args, send_index=send_index.to(dev)) as inbox:
            rows, first = inbox.rows.cpu(), int(inbox.first)
            splits = inbox.splits.cpu()
        assert rows.shape == (cap if nodes else 2 * cap, 5, 4) and rows.dtype == dtype
        assert torch.equal(splits, outs), (splits, outs)
        assert first in ((0,) if nodes else (0, cap)), first
        halves.add(first)
        peer = (torch.repeat_interleave(torch.arange(w), outs) != me)[:kept]
        got = rows[first:first + kept][peer]
        assert torch.equal(got, ref[:kept][peer].to(dtype)), f"inbox call {it} {dtype}"
    assert halves == ({0} if nodes else {0, cap}), halves
    kw = {"send_index": send_index.to(dev)}
    inbox = ditron.ops.all_to_all_inbox(*args, **kw)
    if not nodes:
        with pytest.raises(RuntimeError, match="Inbox of an earlier all_to_all_inbox call .* "
                                               "is still open"):
            ditron.ops.all_to_all_device(*args, **kw)
    inbox.close()
    inbox.close()  # a second close sends nothing
    for _ in range(2):  # the protocol goes on (the second call waits for the inbox's ack)
        out = ditron.ops.all_to_all_device(*args, **kw)[0]
        assert torch.equal(out[:kept].cpu(), ref[:kept].to(dtype))
    with pytest.raises(ValueError, match="all_to_all_inbox: send_index must be an integer"):
        ditron.ops.all_to_all_inbox(x.to(dev), ins.to(dev), cap,
                                    send_index=torch.zeros(2, device=dev))
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_all_to_all_inbox_leaves_rows_in_place(world_size):
    assert ditron.launch(check_all_to_all_inbox, world_size, backend="cpu") == [6] * world_size


def check_exchange_counts(calls: int = 6) -> int:
    """``exchange_counts`` against the ranks' matrices gathered with torch.distributed: row
    ``s`` of the result is row ``me`` of rank ``s``'s matrix. Two row lengths (two
    workspaces), each used on both halves of its double buffer more than once, int32 and
    int64 input."""
    poison_empty()
    rt = current()
    w, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    for it in range(calls):
        L = (5, 64)[it % 2]
        counts = torch.randint(0, 1000, (w, L), generator=_gen(me, it, 17))
        mats = [None] * w
        dist.all_gather_object(mats, counts, group=rt.host_group)
        got = ditron.ops.exchange_counts(counts.to(dev, torch.int32 if it % 3 else torch.int64))
        assert got.dtype == torch.int64
        assert torch.equal(got.cpu(), torch.stack([m[me] for m in mats])), f"call {it}"
    with pytest.raises(ValueError, match=rf"integer \[{w}, L\] tensor"):
        ditron.ops.exchange_counts(torch.zeros(w + 1, 3, dtype=torch.int64, device=dev))
    return calls


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_exchange_counts(world_size, backend):
    assert ditron.launch(check_exchange_counts, world_size, backend=backend) == [6] * world_size


def check_send_recv(calls: int = 3) -> int:
    w, me = ditron.world().world_size, ditron.world().rank
    nxt, prv = (me + 1) % w, (me - 1) % w
    checks = 0
    for it in range(calls):
        dtype = DTYPES[it % 3]
        mine = torch.randn(4, 3, generator=_gen(me, it, 3)).to(dtype).t()  # non-contiguous
        expected = torch.randn(4, 3, generator=_gen(prv, it, 3)).to(dtype).t()
        box = torch.full((3, 4), float("nan"), dtype=dtype)
        if me % 2 == 0:
            ditron.ops.send(mine, nxt)
            got = ditron.ops.recv(box, prv)
        else:
            got = ditron.ops.recv(box, prv)
            ditron.ops.send(mine, nxt)
        assert got is box
        _same(got, expected, "recv into a tensor")
        if me % 2 == 0:
            ditron.ops.send(mine, nxt, engine="network")
            fresh = ditron.ops.recv((3, 4), prv, dtype=dtype)
        else:
            fresh = ditron.ops.recv((3, 4), prv, dtype=dtype)
            ditron.ops.send(mine, nxt, engine="network")
        _same(fresh, expected, "recv by shape")
        checks += 2
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_send_recv_ring(world_size):
    counts = ditron.launch(check_send_recv, world_size, backend="cpu")
    assert all(c == 6 for c in counts)


def check_bad_inputs() -> int:
    me = ditron.world().rank
    ops = ditron.ops
    x = torch.randn(4, 3)
    cases = [
        (ValueError, "does not divide", lambda: ops.reduce_scatter(torch.randn(3, 2))),
        (ValueError, "out of range", lambda: ops.all_gather(x, 2)),
        (ValueError, "cannot sum dtype torch.bool", lambda: ops.all_reduce(x.bool())),
        (ValueError, "meta", lambda: ops.all_reduce(torch.empty(4, device="meta"))),
        (ValueError, "method", lambda: ops.all_reduce(x, "three_shot")),
        (ValueError, "engine", lambda: ops.all_gather(x, engine="pigeon")),
        (ValueError, r"disagree on the call \(shape differs\)",
         lambda: ops.all_gather(torch.randn(2 + me, 3))),
        (ValueError, r"disagree on the call \(dtype differs\)",
         lambda: ops.all_reduce(x.to(DTYPES[me]))),
        (ValueError, "in_splits", lambda: ops.all_to_all(x, [1, 1])),
        (ValueError, "out_splits", lambda: ops.all_to_all(x, [1, 3], [3, 1] if me else [1, 1])),
        (ValueError, "disagree", lambda: ops.all_to_all(torch.randn(2 * (1 + me), 3))),
        # engines run different protocols: asking for different ones is refused everywhere
        (ValueError, r"disagree on the call \(engine differs\)",
         lambda: ops.all_reduce(x, engine=("sm", "copy_engine")[me])),
        (ValueError, r"disagree on the call \(engine differs\)",
         lambda: ops.all_gather(x, engine=("network", "copy_engine")[me])),
        (ValueError, r"disagree on the call \(engine differs\)",
         lambda: ops.all_to_all(x, [1, 3], engine=("sm", "copy_engine")[me])),
        (ValueError, "disagree", lambda: ops.all_to_all(torch.randn(4, 3 + me), [2, 2], [2, 2])),
        # rank 0's out_splits are wrong: rank 0 and its peer (whose own are right) both raise
        (ValueError, "out_splits .*rank 0",
         lambda: ops.all_to_all(x, [2, 2], [2, 2] if me else [2, 1])),
        (ValueError, "peer", lambda: ops.send(x, me)),
        (TypeError, "Tensor", lambda: ops.all_gather([1.0, 2.0])),
    ]
    for exc, words, fn in cases:
        with pytest.raises(exc, match=words):
            fn()
    # a receiver that expects another shape gets a clear error instead of garbage
    if me == 0:
        ops.send(x, 1)
    else:
        with pytest.raises(ValueError, match="sent shape"):
            ops.recv((3, 4), 0)
    # failed calls left no stale state: the ops still work afterwards
    _same(ops.all_gather(x), torch.cat([p for p in _gather_fp32(x)]), "after errors")
    _close(ops.all_reduce(x), _sum_ref(x), "after errors")
    return len(cases) + 3


def test_bad_inputs_raise_before_kernels():
    counts = ditron.launch(check_bad_inputs, 2, backend="cpu")
    assert all(c == 21 for c in counts)


def check_in_place_max_min(engines: tuple[str, ...]) -> int:
    """reduce_scatter's in-place form (``out`` this rank's rows of ``x``) with max / min:
    on rank 2 and above ``out`` is a later slot of the reduction, which the running
    maximum must not overwrite before it is read (it did: rank 2's own values were lost)."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    checks = 0
    for engine in engines:
        for op in ("max", "min"):
            xs = [torch.randn(w * 4, generator=_gen(r, 61, len(engine))) for r in range(w)]
            stacked = torch.stack(xs)
            ref = (stacked.amax(0) if op == "max" else stacked.amin(0)).chunk(w)[me]
            x = xs[me].to(dev)
            got = ditron.ops.reduce_scatter(x, engine=engine, op=op, out=x[me * 4:me * 4 + 4])
            assert torch.equal(got.cpu(), ref), f"{engine} {op}: {got} != {ref}"
            checks += 1
    return checks


def check_overlapping_out_refused() -> int:
    """An ``out`` that overlaps ``x`` other than in torch.distributed's in-place forms
    raises ``ValueError`` on every rank before anything moves (it was accepted, and the
    copy engine's all-gather then wrote the peers' rows over an ``x`` it still pushed:
    wrong rows on the peer, now and then); the in-place forms still work after it."""
    w, me, dev = ditron.world().world_size, ditron.world().rank, ditron.world().device
    other = (me + 1) % w
    checks = 0
    for engine in ("copy_engine", "sm", "network"):
        out = torch.full((w * 3, 2), float("nan"), device=dev)
        x = out[other * 3:other * 3 + 3]
        x.fill_(me)
        with pytest.raises(ValueError, match="all_gather: out overlaps x"):
            ditron.ops.all_gather(x, engine=engine, out=out)
        y = torch.randn(w * 3, 2, device=dev)
        with pytest.raises(ValueError, match="reduce_scatter: out overlaps x"):
            ditron.ops.reduce_scatter(y, engine=engine, out=y[other * 3:other * 3 + 3])
        with pytest.raises(ValueError, match="reduce_scatter: out overlaps x"):
            ditron.ops.reduce_scatter(y, engine=engine, out=y[1:4])
        assert torch.equal(out[other * 3:other * 3 + 3].cpu(), torch.full((3, 2), float(me)))
        # the in-place forms, then a separate out
        x = out[me * 3:me * 3 + 3]
        x.fill_(me)
        got = ditron.ops.all_gather(x, engine=engine, out=out)
        assert got is out and torch.equal(out.cpu(), torch.arange(w).repeat_interleave(6)
                                          .view(-1, 2).float()), engine
        got = ditron.ops.reduce_scatter(y, engine=engine, out=torch.empty(3, 2, device=dev))
        _close(got.cpu(), _sum_ref(y).chunk(w)[me], f"reduce_scatter after refusals {engine}")
        checks += 4
    return checks


def test_overlapping_out_refused(backend):
    assert ditron.launch(check_overlapping_out_refused, 2, backend=backend) == [12, 12]


def test_in_place_reduce_scatter_max_min(backend):
    assert ditron.launch(check_in_place_max_min, 3, ("copy_engine", "tma"),
                         backend=backend) == [4] * 3


def check_mixed_split_arguments() -> int:
    """all_to_all where one rank gives no splits and the others give theirs (a valid call:
    each rank's splits are its own) at shapes never called without splits on every rank;
    at a shape that was, calls without splits on every rank skip the host gather, and calls
    with given splits (even on some ranks, uneven on others) still gather on every rank."""
    w, me = ditron.world().world_size, ditron.world().rank
    dev = ditron.world().device
    g = _gen(me, 5, 31)
    checks = 0
    for rows, warm in ((2 * w, False), (3 * w, True), (3 * w, True)):
        x = torch.randn(rows, 4, generator=g).to(dev)
        even = [rows // w] * w
        if warm:  # every rank without splits: agreed once, later calls skip the host gather
            ref = torch.empty_like(x.cpu())
            dist.all_to_all_single(ref, x.cpu(), group=current().host_group)
            _same(ditron.ops.all_to_all(x).cpu(), ref, "even")
            # given splits, even on rank 0 only (they gathered on the ranks with uneven
            # splits alone: a hang)
            ins = even if me == 0 else [rows - (w - 1) * (rows // w + 1)] + [rows // w + 1] * (
                w - 1)
            table = [torch.zeros(w, dtype=torch.int64) for _ in range(w)]
            dist.all_gather(table, torch.tensor(ins), group=current().host_group)
            outs = [int(table[q][me]) for q in range(w)]
            ref = torch.empty(sum(outs), 4)
            dist.all_to_all_single(ref, x.cpu(), outs, ins, group=current().host_group)
            _same(ditron.ops.all_to_all(x, ins).cpu(), ref, "even on rank 0 only")
            checks += 1
            continue
        ref = torch.empty_like(x.cpu())
        dist.all_to_all_single(ref, x.cpu(), group=current().host_group)
        got = ditron.ops.all_to_all(x) if me == 0 else ditron.ops.all_to_all(x, even)
        _same(got.cpu(), ref, f"rank 0 without splits, {rows} rows")
        got = ditron.ops.all_to_all(x, even, even) if me == 0 else ditron.ops.all_to_all(x)
        _same(got.cpu(), ref, f"rank 0 with both splits, {rows} rows")
        checks += 2
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_with_splits_on_some_ranks_only(world_size, backend):
    assert ditron.launch(check_mixed_split_arguments, world_size, backend=backend) == \
        [4] * world_size


def check_p2p_refusals() -> int:
    """A send or a recv refused on its own rank (an unknown engine, too many dimensions, a
    tensor on another device) makes the other rank raise too, or return, instead of waiting;
    afterwards the two are in step."""
    me = ditron.world().rank
    dev = ditron.world().device
    x = torch.arange(12.0, device=dev).view(3, 4) + 7
    refused_sends = [(ValueError, "unknown engine", lambda: ditron.ops.send(x, 1, engine="pigeon")),
                     (ValueError, "at most 8 dimensions",
                      lambda: ditron.ops.send(torch.zeros((1,) * 9, device=dev), 1)),
                     (TypeError, "Tensor", lambda: ditron.ops.send([1.0], 1))]
    for exc, words, fn in refused_sends:
        if me == 0:
            with pytest.raises(exc, match=words):
                fn()
        else:
            with pytest.raises(RuntimeError, match="rank 0's matching send was refused"):
                ditron.ops.recv((3, 4), 0)
    if me == 0:  # the receiver refuses: the sender returns
        ditron.ops.send(x, 1)
        ditron.ops.send(x, 1)
        ditron.ops.send(x, 1)
    else:
        with pytest.raises(ValueError, match="meta"):
            ditron.ops.recv(torch.empty(3, 4, device="meta"), 0)
        with pytest.raises(ValueError, match="unknown engine"):
            ditron.ops.recv((3, 4), 0, engine="pigeon")
        with pytest.raises(ValueError, match="out has elements that share memory"):
            ditron.ops.recv(torch.empty(1, 4, device=dev).expand(3, 4), 0)
    if me == 0:
        ditron.ops.send(x, 1)
    else:
        assert torch.equal(ditron.ops.recv((3, 4), 0), x)
    return len(refused_sends) + 4


def test_refused_send_or_recv_does_not_leave_the_peer_waiting(backend):
    assert ditron.launch(check_p2p_refusals, 2, backend=backend) == [7, 7]


def check_rank_changing_alone() -> int:
    """Every call agreed once; then the last rank alone changes its shape while the others
    repeat theirs: ``DITRON_CHECK_CALLS=1`` makes every rank raise before any transfer."""
    w = ditron.world()
    last = w.rank == w.world_size - 1
    b = torch.randn(3, 5)
    calls = {
        "all_reduce": lambda rows: ditron.ops.all_reduce(torch.randn(rows, 3)),
        "all_gather": lambda rows: ditron.ops.all_gather(torch.randn(rows, 3)),
        "ag_gemm": lambda rows: ditron.ops.ag_gemm(torch.randn(rows, 3), b),
        "gemm_rs": lambda rows: ditron.ops.gemm_rs(torch.randn(rows * w.world_size, 3), b),
    }
    for name, call in calls.items():
        call(4)
        words = rf"(?s){name}: ranks disagree on the call \((a_)?shape differs\).*rank 0: "
        with pytest.raises(ValueError, match=words + r"(a_)?shape=\(\d+, 3\)"):
            call(5 if last else 4)
        call(4)  # still works
    return len(calls)


@pytest.mark.parametrize("world_size", [2, 3])
def test_check_calls_catches_a_rank_changing_alone(world_size, monkeypatch):
    monkeypatch.setenv("DITRON_CHECK_CALLS", "1")
    assert ditron.launch(check_rank_changing_alone, world_size, backend="cpu") == [4] * world_size


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("engine", ["copy_engine", "sm", "network", "auto"])
def test_collectives_cuda_two_ranks(engine):
    """Run on 2 GPUs (one process each) or on 1 GPU shared by 2 processes."""
    counts = ditron.launch(check_ops, 2, (engine,), 3, 300, backend="cuda")
    assert all(c == 27 for c in counts)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph_safe"])
def test_chunked_exchanges_cuda_two_ranks(monkeypatch, graph):
    """The chunked exchanges in many tiny chunks on real streams, where chunks on different
    streams may land out of order."""
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "24")
    counts = ditron.launch(check_chunked_exchanges, 2, 6, graph, backend="cuda")
    assert counts == [20 if graph else 18] * 2


def _chunked_graph(calls: int = 3, replays: int = 4) -> int:
    """The copy engine's chunked all-gather (by pushes and by pulls) and reduce-scatter,
    ``calls`` of each captured in one CUDA graph and replayed with new inputs. Within the
    capture every call after the first on an inbox writes without an acknowledgement wait
    (``exchange.ACK_BY_DATA``); ``calls`` is odd, so each replay's first call writes the
    half the previous replay's last call wrote, behind its wait."""
    from ditron.ops import chunked_exchanges
    from ditron.ops.graphs import capture_id

    w, me = ditron.world().world_size, ditron.world().rank
    xs = {by: [torch.empty(5, 33, device="cuda") for _ in range(calls)]
          for by in ("push", "pull")}
    xrs = [torch.empty(2 * w, 40, device="cuda") for _ in range(calls)]

    def run() -> tuple[dict, list]:
        ags = {}
        for by, group in xs.items():
            chunked_exchanges.GATHER_BY = by
            ags[by] = [ditron.ops.all_gather(x, 0, engine="copy_engine") for x in group]
        return ags, [ditron.ops.reduce_scatter(x, 0, engine="copy_engine") for x in xrs]

    with ditron.ops.graph_safe():  # workspaces, pads, device epochs
        run()
    torch.cuda.synchronize()
    assert capture_id() is None
    ids = []
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ids.append(capture_id())
        ags, rss = run()
    assert ids[0] is not None, "the capture id is unavailable: every call would wait"
    checks = 0
    for it in range(replays):
        g = _gen(me, it, 13)
        for t in [*xs["push"], *xs["pull"], *xrs]:
            t.copy_(torch.randn(t.shape, generator=g))
        for t in [*ags["push"], *ags["pull"], *rss]:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for by in ("push", "pull"):
            for k, (out, x) in enumerate(zip(ags[by], xs[by], strict=True)):
                _same(out.cpu(), torch.cat(_gather_fp32(x.cpu()), 0),
                       f"replay {it}: all_gather by {by} {k}")
        for k, (out, x) in enumerate(zip(rss, xrs, strict=True)):
            _close(out.cpu(), _sum_ref(x.cpu()).chunk(w, 0)[me], f"replay {it}: "
                   f"reduce_scatter {k}")
        checks += 3 * calls
    return checks


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_chunked_exchanges_in_cuda_graph(monkeypatch):
    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "96")
    assert ditron.launch(_chunked_graph, 2, backend="cuda") == [36, 36]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_all_to_all_device_cuda_two_ranks():
    counts = ditron.launch(check_all_to_all_device, 2, 7, backend="cuda")
    assert all(c == 7 for c in counts)
    counts = ditron.launch(check_all_to_all_device_indexed, 2, backend="cuda")
    assert counts == [6, 6]
    counts = ditron.launch(check_all_to_all_device_indexed, 2, 6, (64, 8), backend="cuda")
    assert counts == [6, 6]
    assert ditron.launch(check_all_to_all_inbox, 2, backend="cuda") == [6, 6]


def _a2a_device_graph() -> int:
    """Capture one all_to_all_device, replay it with new rows and new device splits."""
    w, me = ditron.world().world_size, ditron.world().rank
    x = torch.zeros(3 * w, 5, device="cuda")
    splits = torch.zeros(w, dtype=torch.int64, device="cuda")
    splits.fill_(3)
    ditron.ops.all_to_all_device(x, splits, 4 * w)  # warm-up: workspace, compilation
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, out_splits = ditron.ops.all_to_all_device(x, splits, 4 * w)
    checks = 0
    for it in range(4):
        g = _gen(me, it, 11)
        ins = torch.randint(0, 4, (w,), generator=g)
        rows = torch.randn(int(ins.sum()), 5, generator=g)
        outs, ref = _a2a_ref(rows, ins)
        x.zero_()
        x[: rows.shape[0]].copy_(rows)
        splits.copy_(ins)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_splits.cpu(), outs)
        _same(out[: int(outs.sum())].cpu(), ref, f"all_to_all_device graph replay {it}")
        checks += 1
    return checks


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_all_to_all_device_in_cuda_graph():
    assert ditron.launch(_a2a_device_graph, 2, backend="cuda") == [4, 4]


def check_device_exchanges_across_nodes() -> int:
    """The device all-to-all's checks on a world over several nodes (its host-synchronised
    form, ``ops/a2a_nodes.py``; with a companion, a row and its companion travel as one row
    of bytes): the same results as on one node."""
    from ditron.ops import a2a_nodes

    assert current().topo.num_nodes > 1
    checks = (check_all_to_all_device(7) + check_all_to_all_device_indexed()
              + check_all_to_all_inbox() + check_exchange_counts()
              + check_all_to_all_device_pair())
    dev = ditron.world().device
    x, splits = torch.ones(2, 3, device=dev), torch.zeros(ditron.world().world_size,
                                                          dtype=torch.int64, device=dev)
    real, a2a_nodes.capturing = a2a_nodes.capturing, lambda: True  # as if capturing a graph
    try:
        for op in (ditron.ops.all_to_all_device, ditron.ops.all_to_all_inbox):
            with pytest.raises(RuntimeError, match="across nodes the split sizes are read on "
                                                   "the host"):
                op(x, splits, 4)
    finally:
        a2a_nodes.capturing = real
    return checks


@pytest.mark.parametrize("world_size,node_size", [(2, 1), (3, 2), (4, 2)])
def test_device_exchanges_across_simulated_nodes(monkeypatch, world_size, node_size, backend):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", str(node_size))  # ranks {0, 1}, {2, 3}, ...
    counts = ditron.launch(check_device_exchanges_across_nodes, world_size, backend=backend)
    assert counts == [30] * world_size
