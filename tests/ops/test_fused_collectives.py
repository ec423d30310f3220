"""The fused collectives (``engine="sm"``, one node): one kernel, epochs on the device.

Against torch.distributed references (gloo; fp32 sums of the gathered inputs) on fresh
random data: sizes that do not divide into blocks, slices or ranks, several sizes sharing one
workspace, all-reduce inputs larger than one launch, repeated calls, and identical launches
replayed on the same buffers (what a CUDA graph replay does) with new input values each time.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.kernels import fused_collective as kfc
from ditron.ops import collectives, fused_launch
from ditron.runtime.world import current

from .poison import poison_empty

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _reference(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty(x.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    return torch.stack(parts).sum(0).to(x.dtype)


def _same_on_every_rank(y: torch.Tensor) -> bool:
    parts = [torch.empty(y.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y.float().cpu(), group=current().host_group)
    return all(torch.equal(p, parts[0]) for p in parts)


def _gathered(x: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty(x.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.float().cpu(), group=current().host_group)
    return torch.cat(parts).to(x.dtype)


def _exchanged(x: torch.Tensor) -> torch.Tensor:
    """What all-to-all with even splits gives this rank: block ``me`` of every rank's ``x``."""
    w, me = dist.get_world_size(), ditron.world().rank
    everyone = _gathered(x.reshape(-1)).view(w, w, -1)
    return everyone[:, me].reshape(x.shape)


def _check(got: torch.Tensor, x: torch.Tensor, what: str, mode: int = kfc.ALL_REDUCE) -> None:
    if mode == kfc.ALL_GATHER:
        ref = _gathered(x)
    elif mode == kfc.ALL_TO_ALL:
        ref = _exchanged(x)
    elif mode == kfc.REDUCE_SCATTER:
        ref = _reference(x).chunk(dist.get_world_size())[ditron.world().rank]
    else:
        ref = _reference(x)
    assert not torch.isnan(got.float()).any(), f"{what}: unwritten elements"
    assert got.shape == ref.shape and got.dtype == x.dtype, what
    if mode in (kfc.ALL_GATHER, kfc.ALL_TO_ALL):  # moves only: bit for bit
        assert torch.equal(got.cpu(), ref), f"{what}: not bit-exact"
    else:
        tol = 1e-5 if x.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.cpu(), ref, rtol=tol, atol=tol, msg=what)
    if mode in (kfc.ALL_REDUCE, kfc.TWO_SHOT):
        assert _same_on_every_rank(got), f"{what}: ranks got different bits"


def _rank_sizes_and_repeats() -> int:
    poison_empty()  # the ops' fresh outputs are NaN until written
    me, w = ditron.world().rank, ditron.world().world_size
    dev = ditron.world().device
    checks = 0
    # 1000/1023/1500 share the 2048-element workspace with different slicings
    sizes = [1, 5, 1000, 1023, 1500, 4099]
    for it in range(2):
        for i, n in enumerate(sizes):
            dtype = DTYPES[(i + it) % 3]
            g = torch.Generator().manual_seed(1000 * me + 10 * i + it)
            x = torch.randn(n, generator=g).to(dtype).to(dev)
            for method in ("one_shot", "two_shot"):
                got = ditron.ops.all_reduce(x, method, engine="sm")
                _check(got, x, f"n={n} {dtype} {method} call {it}")
                checks += 1
            got = ditron.ops.all_gather(x, engine="sm")
            _check(got, x, f"all_gather n={n} {dtype} call {it}", kfc.ALL_GATHER)
            xr = torch.randn(n * w, generator=g).to(dtype).to(dev)
            got = ditron.ops.reduce_scatter(xr, engine="sm")
            _check(got, xr, f"reduce_scatter n={n} {dtype} call {it}", kfc.REDUCE_SCATTER)
            got = ditron.ops.all_to_all(xr.view(w, n), engine="sm")
            _check(got, xr.view(w, n), f"all_to_all n={n} {dtype} call {it}", kfc.ALL_TO_ALL)
            checks += 3
    # a 2-D input and one larger than a launch (pieces of FUSED_MAX_ELEMENTS)
    default_max = fused_launch.FUSED_MAX_ELEMENTS, fused_launch.FUSED_RS_MAX_ELEMENTS
    fused_launch.FUSED_MAX_ELEMENTS = fused_launch.FUSED_RS_MAX_ELEMENTS = 2048
    try:
        g = torch.Generator().manual_seed(77 + me)
        x = torch.randn(9, 700, generator=g).to(dev)
        for method in ("one_shot", "two_shot"):
            _check(ditron.ops.all_reduce(x, method, engine="sm"), x, f"pieces {method}")
            checks += 1
        part = x[:5].reshape(-1)  # 3500 elements: two pieces
        _check(ditron.ops.all_gather(part, engine="sm"), part, "pieces ag", kfc.ALL_GATHER)
        xr = torch.randn(w * 1700 + 2 * w, generator=g).to(dev)  # segments in 2 pieces
        _check(ditron.ops.reduce_scatter(xr, engine="sm"), xr, "pieces rs",
               kfc.REDUCE_SCATTER)
        rows = xr.view(w * 2, -1)  # explicit even splits, segments in 2 pieces
        got = ditron.ops.all_to_all(rows, [2] * w, [2] * w, engine="sm")
        _check(got, rows, "pieces a2a", kfc.ALL_TO_ALL)
        checks += 3
    finally:
        fused_launch.FUSED_MAX_ELEMENTS, fused_launch.FUSED_RS_MAX_ELEMENTS = default_max
    return checks


def _rank_large(sizes: tuple[int, ...] = (600_001, 2_500_003, 20_000_001)) -> int:
    """Inputs of 1-40 MB with the default variant of each size (the GPU picks push and
    larger blocks there): all-reduce both methods, all-gather, reduce-scatter, twice each."""
    poison_empty()
    me, w = ditron.world().rank, ditron.world().world_size
    dev = ditron.world().device
    checks = 0
    for it in range(2):
        for n in sizes:
            g = torch.Generator().manual_seed(1000 * me + n % 97 + it)
            x = torch.randn(n, generator=g).to(torch.bfloat16).to(dev)
            for method in ("one_shot", "two_shot"):
                _check(ditron.ops.all_reduce(x, method, engine="sm"), x, f"{n} {method}")
                checks += 1
            part = x[: n // 4]
            _check(ditron.ops.all_gather(part, engine="sm"), part, f"ag {n}", kfc.ALL_GATHER)
            xr = x[: (n // 4 // w) * w]
            _check(ditron.ops.reduce_scatter(xr, engine="sm"), xr, f"rs {n}",
                   kfc.REDUCE_SCATTER)
            _check(ditron.ops.all_to_all(xr, engine="sm"), xr, f"a2a {n}", kfc.ALL_TO_ALL)
            checks += 3
    return checks


def _rank_replay() -> int:
    """The same launch (same tensors, same arguments) four times with new input values."""
    me = ditron.world().rank
    dev = ditron.world().device
    checks = 0
    w = ditron.world().world_size
    for mode in (kfc.ALL_REDUCE, kfc.TWO_SHOT, kfc.REDUCE_SCATTER, kfc.ALL_GATHER,
                 kfc.ALL_TO_ALL):
        n = 3001 * w if mode in (kfc.REDUCE_SCATTER, kfc.ALL_TO_ALL) else 3001
        x = torch.empty(n, dtype=torch.bfloat16, device=dev)
        out_n = {kfc.REDUCE_SCATTER: n // w, kfc.ALL_GATHER: n * w}.get(mode, n)
        out = torch.empty(out_n, dtype=x.dtype, device=dev)
        variant = fused_launch.fused_variant(x.numel() * x.element_size(), "cpu")
        ws = fused_launch.workspace(x.dtype, mode, n, variant)
        assert ws.push == (os.environ.get("DITRON_FUSED_PUSH") == "1")
        ctx = current().context()
        for it in range(4):
            g = torch.Generator().manual_seed(100 * me + it)
            x.copy_(torch.randn(x.numel(), generator=g).to(x.dtype))
            out.fill_(float("nan"))
            kfc.launch(x, out, ws, mode, ctx, block=1024, num_warps=1)
            _check(out, x, f"replay {it} mode={mode}", mode)
            checks += 1
    return checks


@pytest.mark.parametrize("world_size,variant",
                         [(2, "pull"), (3, "pull"), (4, "pull"), (8, "pull"), (2, "push"),
                          (3, "push"), (4, "push")])
def test_fused_collectives_match_torch(world_size, variant, monkeypatch):
    """Both variants of the kernel (pull: remote loads; push: remote stores, here also with
    a larger block)."""
    monkeypatch.setenv("DITRON_FUSED_PUSH", "1" if variant == "push" else "0")
    if variant == "push":
        monkeypatch.setenv("DITRON_FUSED_BLOCK", "2048")
    assert ditron.launch(_rank_sizes_and_repeats, world_size) == [65] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("variant", ["pull", "push"])
def test_fused_collectives_survive_replayed_launches(world_size, variant, monkeypatch):
    monkeypatch.setenv("DITRON_FUSED_PUSH", "1" if variant == "push" else "0")
    assert ditron.launch(_rank_replay, world_size) == [20] * world_size


def _rank_release() -> int:
    """``release_workspaces`` frees the fused workspaces and their pads; calls after it
    allocate afresh (device epochs restart with fresh pads) and stay correct."""
    me, w = ditron.world().rank, ditron.world().world_size
    dev = ditron.world().device
    heap = current().heap
    checks = 0
    for round_ in range(2):
        for it in range(3):
            g = torch.Generator().manual_seed(10 * me + it + 100 * round_)
            x = torch.randn(3000, generator=g).to(dev)
            _check(ditron.ops.all_reduce(x, "two_shot", engine="sm"), x, f"ar {round_} {it}")
            _check(ditron.ops.all_gather(x, engine="sm"), x, f"ag {round_} {it}",
                   kfc.ALL_GATHER)
            rows = x[: 4 * w].view(2 * w, 2)  # 2 rows for every rank
            splits = torch.full((w,), 2, dtype=torch.int64, device=dev)
            out, counts = ditron.ops.all_to_all_device(rows, splits, 2 * w)
            everyone = _gathered(rows.reshape(-1)).view(w, 2 * w, 2)
            expected = everyone[:, 2 * me: 2 * me + 2].reshape(2 * w, 2)
            assert counts.tolist() == [2] * w
            assert torch.equal(out.cpu(), expected), f"a2a {round_} {it}"
            checks += 3
        used = heap.used_bytes
        collectives.release_workspaces()
        assert heap.used_bytes < used, (heap.used_bytes, used)
    return checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_release_workspaces_frees_and_calls_still_work(world_size):
    assert ditron.launch(_rank_release, world_size) == [18] * world_size


def _one_rank() -> bool:
    x = torch.randn(17, device=ditron.world().device)
    y = ditron.ops.all_reduce(x, engine="sm")
    return torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_fused_all_reduce_world_of_one():
    assert ditron.launch(_one_rank, 1) == [True]


def _replays(graph: torch.cuda.CUDAGraph, x: torch.Tensor, y: torch.Tensor, what: str,
             mode: int = kfc.ALL_REDUCE, seed: int = 0, times: int = 3) -> int:
    """Replay ``graph`` (which reads ``x`` and writes ``y``) ``times`` times, with fresh
    values in ``x`` and ``y`` poisoned before each replay; check every result."""
    me = ditron.world().rank
    for it in range(times):
        g = torch.Generator().manual_seed(seed + 100 * me + it)
        x.copy_(torch.randn(x.shape, generator=g).to(x.dtype))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        flat = mode != kfc.ALL_TO_ALL
        _check(y.reshape(-1) if flat else y, x.reshape(-1) if flat else x,
               f"graph replay {it} {what}", mode)
    return times


def _rank_graph() -> int:
    """CUDA graphs: capture each collective, replay it with new inputs (GPU only)."""
    checks = 0
    for method, engine in (("one_shot", "sm"), ("two_shot", "sm"), ("auto", None)):
        x = torch.empty(5000, dtype=torch.bfloat16, device="cuda")
        x.normal_()
        ditron.ops.all_reduce(x, method, engine="sm")  # warm-up: workspace, compile
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # "auto" while capturing takes the graph-safe path
            y = ditron.ops.all_reduce(x, method, engine=engine)
        checks += _replays(graph, x, y, method, seed=10, times=5)
    w = ditron.world().world_size
    for name, mode in (("all_gather", kfc.ALL_GATHER), ("reduce_scatter", kfc.REDUCE_SCATTER),
                       ("all_to_all", kfc.ALL_TO_ALL)):
        x = torch.empty(6 * w, 333, dtype=torch.bfloat16, device="cuda")
        op = getattr(ditron.ops, name)
        op(x.normal_(), engine="sm")  # warm-up
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = op(x)  # "auto" while capturing, below the fused limit: the fused path
        checks += _replays(graph, x, y, name, mode, seed=20)
    # the copy engine's chunked all-gather / reduce-scatter: graph-safe variants after a
    # warm-up inside graph_safe(), chosen by name and, above the fused limits (lowered
    # here to 64 KB per peer), by "auto"
    collectives.FUSED_AG_MAX_BYTES = collectives.FUSED_RS_MAX_BYTES = 64 << 10
    for engine, rows in (("copy_engine", 6), (None, 64)):
        for name, mode in (("all_gather", kfc.ALL_GATHER),
                           ("reduce_scatter", kfc.REDUCE_SCATTER)):
            x = torch.empty(rows * w, 1000, dtype=torch.bfloat16, device="cuda").normal_()
            op = getattr(ditron.ops, name)
            with ditron.ops.graph_safe():
                per_peer = x.numel() * x.element_size() // (w if mode != kfc.ALL_GATHER else 1)
                assert collectives._engine_name(name, engine, per_peer) == "copy_engine"
                op(x, engine=engine)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = op(x, engine=engine)
            checks += _replays(graph, x, y, f"{name} {engine or 'auto'}", mode, seed=30)
    # ops that keep per-call state on the host refuse capture instead of replaying stale state
    x = torch.randn(64, device="cuda")
    uneven = [64 - (w - 1)] + [1] * (w - 1)
    ditron.ops.all_to_all(x, uneven)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ditron.ops.all_to_all(x, uneven)
    return checks + 1


def _rank_graph_in(inference: bool) -> int:
    """``_rank_graph`` under ``torch.inference_mode(inference)`` (inputs, warm-ups, captures
    and replays), as a serving engine captures its graphs."""
    with torch.inference_mode(inference):
        return _rank_graph()


@pytest.mark.gpu
@pytest.mark.parametrize("inference", [False, True])
def test_fused_collectives_in_cuda_graph(inference):
    assert ditron.launch(_rank_graph_in, 2, inference, backend="cuda") == [37, 37]


def _rank_refuses_capture() -> int:
    """With a capture pretended in progress, the host-epoch paths raise before any kernel
    and the fused path still runs (the CPU backend cannot capture for real)."""
    import torch.cuda

    w = ditron.world().world_size
    x = torch.randn(6 * w, 4)
    ditron.ops.all_reduce(x, engine="sm")  # workspaces exist before the "capture"
    real = (torch.cuda.is_initialized, torch.cuda.is_current_stream_capturing)
    torch.cuda.is_initialized = lambda: True
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        checks = 0
        for call in (lambda: ditron.ops.all_reduce(x, engine="copy_engine"),
                     lambda: ditron.ops.all_to_all(x, [6 * w - w + 1] + [1] * (w - 1)),
                     lambda: ditron.ops.ag_gemm(x, torch.randn(4, 8), method="overlap",
                                                engine="colocated")):
            with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
                call()
            checks += 1
        with pytest.raises(RuntimeError, match="before capturing a CUDA graph"):
            ditron.ops.all_reduce(torch.randn(5000), engine="sm")  # no workspace yet
        # no graph-safe warm-up yet
        with pytest.raises(RuntimeError, match="graph_safe"):
            ditron.ops.ag_gemm(x, torch.randn(4, 8), method="overlap")
        with pytest.raises(RuntimeError, match="graph_safe"):
            ditron.ops.all_gather(x, engine="copy_engine")
        got = ditron.ops.all_reduce(x, engine="sm")
    finally:
        torch.cuda.is_initialized, torch.cuda.is_current_stream_capturing = real
    _check(got, x, "fused all_reduce during a (pretended) capture")
    return checks + 4


def test_host_state_paths_refuse_capture():
    assert ditron.launch(_rank_refuses_capture, 2) == [7, 7]


def test_fused_variant_rules(monkeypatch):
    """The GPU variant table (a pure function; the GPU runs time what it picks)."""
    for knob in ("DITRON_FUSED_PUSH", "DITRON_FUSED_BLOCK", "DITRON_FUSED_PROGRAMS",
                 "DITRON_FUSED_WARPS"):
        monkeypatch.delenv(knob, raising=False)
    V = fused_launch.FusedVariant
    pick = fused_launch.fused_variant
    big = fused_launch.WIDE_MIN_BYTES
    assert pick(4 << 10, "cuda", kfc.ALL_GATHER) == V(False, 1024, 4)
    assert pick(1 << 20, "cuda", kfc.ALL_REDUCE) == V(True, 2048, 8)
    assert pick(8 << 20, "cuda", kfc.REDUCE_SCATTER) == V(True, 4096, 8)
    # from WIDE_MIN_BYTES: 16384-element steps on 16 warps; all-gather pulls, the rest push
    assert pick(big, "cuda", kfc.ALL_GATHER) == V(False, 16384, 16)
    # the wide all-gather by pulls: WIDE_AG_PROGRAMS_PER_SM programs per SM where known
    per_sm = fused_launch.WIDE_AG_PROGRAMS_PER_SM
    assert pick(big, "cuda", kfc.ALL_GATHER, sms=132) == V(False, 16384, 16, per_sm * 132)
    assert pick(big, "cuda", kfc.REDUCE_SCATTER, sms=132) == V(True, 32768, 16)
    assert pick(big // 2, "cuda", kfc.ALL_GATHER, sms=132).programs == 0
    assert pick(big, "cuda", kfc.REDUCE_SCATTER) == V(True, 32768, 16)
    assert pick(big, "cuda", kfc.ALL_TO_ALL) == V(True, 16384, 16)
    assert pick(big, "cuda", kfc.ALL_REDUCE) == V(True, 4096, 8)  # not measured: unchanged
    assert pick(big, "cuda", kfc.ALL_GATHER, shared_gpu=True) == V(True, 4096, 8)
    # 8-byte elements: blocks of at most MAX_BLOCK_BYTES (the 4-byte ones' widest)
    assert pick(big, "cuda", kfc.REDUCE_SCATTER, itemsize=8) == V(True, 16384, 16)
    assert pick(big, "cuda", kfc.REDUCE_SCATTER, itemsize=4) == V(True, 32768, 16)
    assert pick(big, "cuda", kfc.ALL_GATHER, itemsize=8) == V(False, 16384, 16)
    monkeypatch.setenv("DITRON_FUSED_PUSH", "1")
    monkeypatch.setenv("DITRON_FUSED_PROGRAMS", "256")
    monkeypatch.setenv("DITRON_FUSED_WARPS", "4")
    assert pick(big, "cuda", kfc.ALL_GATHER) == V(True, 16384, 4, 256)
    assert pick(big, "cpu", kfc.ALL_GATHER) == V(True, 1024, 1)  # the interpreter


@pytest.mark.parametrize("knob,backend", [("DITRON_FUSED_BLOCK", "cpu"),
                                          ("DITRON_FUSED_BLOCK", "cuda"),
                                          ("DITRON_FUSED_WARPS", "cuda")])
def test_fused_variant_refuses_non_power_of_two(monkeypatch, knob, backend):
    """A block or warp count that is not a power of two is refused naming the setting (it
    failed later, in every rank's kernel: "arange's range must be a power of 2")."""
    from ditron.runtime.config import SettingsError

    monkeypatch.setenv(knob, "1000")
    with pytest.raises(SettingsError, match=f"{knob} must be a power of two, got 1000"):
        fused_launch.fused_variant(1 << 20, backend)
    monkeypatch.setenv(knob, "512")
    assert 512 in dataclasses.astuple(fused_launch.fused_variant(1 << 20, backend))
