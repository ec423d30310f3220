"""Megakernels on 1-4 ranks against torch: a tensor-parallel MLP stack, tile orders,
repeated calls, timeouts that name the tile, and graphs that differ across ranks."""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import ditron
import ditron.language as dl
from ditron import task as dt

from ..ops.poison import poison_empty

TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
H200_SMEM = 232448  # shared memory per program (opt-in) on an H200


def _close(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    tol = TOL[got.dtype]
    got, ref = got.double().cpu(), ref.double().cpu()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if not got.numel():  # no rows: nothing to compare
        return
    assert torch.isfinite(got).all(), f"{name}: unwritten (NaN) or non-finite elements"
    err = (got - ref).abs().max().item()
    scale = max(ref.abs().max().item(), 1e-6)
    assert err <= 4 * tol * scale, f"{name}: max error {err} vs scale {scale}"


def _mlp_case(M: int, H: int, F: int, layers: int, dtype, calls: int, blocks,
              graphed: bool = False, outline: bool = True,
              descriptor_tasks: int | None = None, misaligned_rank: int | None = None
              ) -> int:
    """``layers`` MLPs chained (each layer's output is the next one's input and its residual,
    ``h`` and ``inbox`` shared by all layers) on fresh inputs per call, against the whole
    MLP in float64 (every rank builds every rank's weights from one seed). ``graphed``
    (CUDA): calls after the first replay a CUDA graph that captured the megakernel.
    ``descriptor_tasks``: how many tasks must load through TMA descriptors;
    ``misaligned_rank``: that rank's input starts 4 bytes into its buffer (not aligned for
    TMA), so its first ``up`` task loads through pointers and the others' do not."""
    from ditron.task.tp_mlp import add_tp_mlp_stack

    poison_empty()
    w = ditron.world()
    W, rank, dev = w.world_size, w.rank, w.device
    torch.manual_seed(7)
    full = [(torch.randn(H, F * W, dtype=torch.float64) / H ** 0.5,
             torch.randn(H, F * W, dtype=torch.float64) / H ** 0.5,
             torch.randn(F * W, H, dtype=torch.float64) / (F * W) ** 0.5) for _ in range(layers)]
    cols = slice(rank * F, (rank + 1) * F)
    graph = dt.TaskGraph("mlp")
    # the gate weight as a transposed view: weights with any strides
    local = [(wg[:, cols].t().contiguous().to(dev, dtype).t(), wu[:, cols].to(dev, dtype),
              wd[cols].to(dev, dtype)) for wg, wu, wd in full]
    xs = [torch.empty(M, H, dtype=dtype, device=dev)]
    if rank == misaligned_rank:
        xs[0] = torch.empty(M * H + 2, dtype=dtype, device=dev)[4 // xs[0].element_size():][
            :M * H].view(M, H)
    stack = add_tp_mlp_stack(graph, xs[0], local, blocks=blocks)
    xs += stack.outs
    assert stack.out is xs[-1] and len(stack.outs) == layers
    if descriptor_tasks is not None:
        described = [t.name for t in graph.tasks
                     if any(isinstance(a, TensorDescriptor) for a in t.args)]
        assert len(described) == descriptor_tasks - (rank == misaligned_rank), described
    mk = graph.compile(outline=outline)
    run = mk
    if graphed:
        cuda_graph = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="once before capturing"):
            with torch.cuda.graph(cuda_graph):
                mk()
        cuda_graph = torch.cuda.CUDAGraph()
    checks = 0
    for call in range(calls):
        torch.manual_seed(100 + call)  # the same input on every rank (replicated)
        x = torch.randn(M, H, dtype=torch.float64)
        xs[0].copy_(x)
        for t in xs[1:]:
            t.fill_(float("nan"))
        run()
        if graphed and call == 0:
            with torch.cuda.graph(cuda_graph):
                mk()  # captured, not run
            run = cuda_graph.replay
        ref = xs[0].double().cpu()
        for wg, wu, wd in full:
            ref = (torch.nn.functional.silu(ref @ wg) * (ref @ wu)) @ wd + ref
        _close(f"call {call}", xs[-1], ref)
        checks += 1
    assert mk.calls == (2 if graphed else calls)
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_tp_mlp_stack_matches_torch(world_size, backend):
    from ditron.task.tp_mlp import MlpBlocks

    # 20 rows (a partial row tile), hidden 72 and 40 ffn columns per rank: no dimension
    # divides into its tiles; two layers sharing the scratch buffers; three calls
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=32, reduce_n=64)
    res = ditron.launch(_mlp_case, world_size, 20, 72, 40, 2, torch.float32, 3, blocks,
                        backend=backend)
    assert res == [3] * world_size


def test_tile_functions_inline_or_out_of_line(backend):
    from ditron.task import codegen
    from ditron.task.tp_mlp import MlpBlocks

    # the generated sources: one out-of-line caller per distinct tile function (two for
    # four tasks of two functions), or none; then an inlined MLP stack against torch
    g = dt.TaskGraph("src")
    x = torch.zeros(16, 32)
    for i in range(2):
        g.add(f"a{i}", _double_tile, x, x, 8, 64, tiles=1)
        g.add(f"b{i}", _push_to_peer_tile, x, x, 8, dt.CTX, 64, tiles=1)
    outlined, _ = codegen.source(g.tasks)
    inlined, _ = codegen.source(g.tasks, outline=False)
    assert outlined.count("@triton.jit(noinline=True)") == 2
    assert "noinline" not in inlined and "task_3(tile, " in inlined
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=32, reduce_n=64)
    res = ditron.launch(_mlp_case, 2, 20, 72, 40, 2, torch.float32, 2, blocks, False, False,
                        backend=backend)
    assert res == [2, 2]


def test_descriptor_tasks_fence_the_async_proxy():
    from ditron.kernels import tiles
    from ditron.task import codegen

    # the generated kernel orders what an item waited for before its TMA loads: a fence in
    # the branch of each task given descriptors, none elsewhere
    a, b, c = torch.zeros(32, 32), torch.zeros(32, 32), torch.zeros(32, 32)
    desc = TensorDescriptor(a, [32, 32], [32, 1], [16, 16])
    g = dt.TaskGraph("fenced")
    g.add("plain", tiles.matmul_tile, a, b, c, 32, 32, 32, 32, 1, 32, 1, 32, 1, 16, 16, 16,
          "ieee", True, tiles=4)
    g.add("tma", tiles.matmul_tile, desc, desc, c, 32, 32, 32, 32, 1, 32, 1, 32, 1, 16, 16,
          16, "ieee", True, None, True, False, tiles=4)
    for outline in (True, False):
        text, _ = codegen.source(g.tasks, outline=outline)
        branches = text.split("elif task == 1:")
        assert len(branches) == 2 and "dl.fence_async_proxy(ON_GPU)" not in branches[0]
        assert branches[1].split("\n")[1].strip() == "dl.fence_async_proxy(ON_GPU)"


def test_tp_mlp_bf16(backend):
    from ditron.task.tp_mlp import MlpBlocks

    # the GEMMs' K loops pipelined 2 deep (the interpreter runs them in order)
    blocks = MlpBlocks(block_m=16, block_n=64, block_k=32, reduce_n=128, stages=2)
    res = ditron.launch(_mlp_case, 2, 5, 96, 80, 1, torch.bfloat16, 2, blocks,
                        backend=backend)
    assert res == [2, 2]


@pytest.mark.parametrize("world_size, dtype", [(1, torch.float32), (2, torch.bfloat16),
                                               (3, torch.float32)])
def test_tp_mlp_through_descriptors(world_size, dtype, backend):
    from ditron.task.tp_mlp import MlpBlocks

    # the GEMM tasks load x, h and the weights (the gate's transposed, the others row-major)
    # through TMA descriptors, emulated by the interpreter on the CPU backend: boxes past
    # the ends of 20 rows, hidden 72 and 40 ffn columns per rank load zeros; the down
    # tiles' split-K chunks stop at whole K blocks. In fp32 the up tasks load through
    # pointers: their gate weight is transposed (``descriptors.transposable``)
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=16, reduce_n=64, split_k=2, tma=True)
    described = 4 if dtype == torch.bfloat16 else 2
    res = ditron.launch(_mlp_case, world_size, 20, 72, 40, 2, dtype, 3, blocks, False, True,
                        described, backend=backend)
    assert res == [3] * world_size


@pytest.mark.parametrize("tma", [False, True])
def test_tp_mlp_with_wider_down_tiles(tma, backend):
    from ditron.task.tp_mlp import MlpBlocks

    # down tiles of 64 columns over hidden 72 (one and a half tiles), up tiles of 32, at
    # three ranks; through pointers and through descriptors
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=16, reduce_n=64, split_k=2, tma=tma,
                       down_n=64)
    res = ditron.launch(_mlp_case, 3, 20, 72, 40, 2, torch.float32, 2, blocks,
                        backend=backend)
    assert res == [2] * 3


@pytest.mark.parametrize("tokens", [16, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_tp_mlp_with_the_gpu_default_blocks(tokens, dtype, backend):
    """The tiles an H200 takes when none are tuned (``default_blocks`` for its shared
    memory), through descriptors as on a GPU, on shapes smaller than a tile; on the CPU
    backend the CI's compile check then compiles these launches for sm_90. fp32 up tasks
    load through pointers (their gate weight is transposed)."""
    import dataclasses

    from ditron.task.tp_mlp import default_blocks

    blocks = dataclasses.replace(default_blocks(tokens, dtype, smem=H200_SMEM), tma=True)
    described = 2 if dtype == torch.bfloat16 else 1
    res = ditron.launch(_mlp_case, 2, 20, 264, 136, 1, dtype, 2, blocks, False, True,
                        described, backend=backend)
    assert res == [2, 2]


def test_tp_mlp_one_rank_without_descriptors(backend):
    from ditron.task.tp_mlp import MlpBlocks

    # rank 1's input is not aligned for TMA: its first up task loads x through pointers
    # while rank 0's loads through a descriptor; the ranks still agree on the graph
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=16, reduce_n=64, tma=True)
    res = ditron.launch(_mlp_case, 2, 20, 72, 40, 2, torch.bfloat16, 2, blocks, False, True,
                        4, 1, backend=backend)
    assert res == [2, 2]


@triton.jit
def _scale_tile(tile, x, y, n, factor, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) * factor, mask=mask)


@triton.jit
def _reverse_tile(tile, y, z, n, BLOCK: tl.constexpr):
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(z + offs, tl.load(y + (n - 1 - offs), mask=mask, other=0.0), mask=mask)


def _chain_case(programs: int | None) -> int:
    """z = reverse(3 x): the second task's tiles read the first task's tiles of the mirrored
    rows; tiles run in a per-rank rotated order (a swizzle)."""
    poison_empty()
    w = ditron.world()
    n, block = 100, 16
    tiles = -(-n // block)
    x = torch.empty(n, device=w.device)
    y, z = torch.empty_like(x), torch.empty_like(x)

    def rows(t, tile):
        return [dt.region(t, (tile * block, (tile + 1) * block))]

    def mirrored(tile, rank):
        stop = n - tile * block
        return [dt.region(y, (max(stop - block, 0), stop))]

    g = dt.TaskGraph("chain")
    g.add("scale", _scale_tile, x, y, n, 3.0, block, tiles=tiles,
          reads=lambda t, r: rows(x, t), writes=lambda t, r: rows(y, t),
          order=lambda r: [(i + r + 1) % tiles for i in range(tiles)])
    g.add("reverse", _reverse_tile, y, z, n, BLOCK=block, tiles=tiles, reads=mirrored,
          writes=lambda t, r: rows(z, t), order=lambda r: list(reversed(range(tiles))))
    mk = g.compile(programs=programs)
    mine = w.rank * 2 * tiles  # slot of item i done by this rank: rank * n_items + i
    assert mk.schedule.waits(tiles) == [mine + tiles - 2, mine + tiles - 1]  # rows 84-100
    for call in range(3):
        x.copy_(torch.randn(n))
        z.fill_(float("nan"))
        mk()
        assert torch.equal(z.cpu(), (3.0 * x).flip(0).cpu()), f"call {call}"
    return mk.programs


def _tensors(n: int, block: int = 16) -> tuple[torch.Tensor, torch.Tensor, int]:
    x = torch.empty(n, device=ditron.world().device)
    return x, torch.empty_like(x), -(-n // block)


def _scale_reverse(name: str, x: torch.Tensor, z: torch.Tensor, block: int = 16):
    """``z = reverse(3 x)`` as two tasks in row-major tile order (each reverse tile waits
    for every scale tile)."""
    n, tiles = x.numel(), -(-x.numel() // block)
    y = torch.empty_like(x)
    g = dt.TaskGraph(name)
    g.add("scale", _scale_tile, x, y, n, 3.0, block, tiles=tiles,
          reads=lambda t, r: [dt.region(x, (t * block, (t + 1) * block))],
          writes=lambda t, r: [dt.region(y, (t * block, (t + 1) * block))])
    g.add("reverse", _reverse_tile, y, z, n, BLOCK=block, tiles=tiles,
          reads=lambda t, r: [dt.region(y, (0, n))],
          writes=lambda t, r: [dt.region(z, (t * block, (t + 1) * block))])
    return g


def _inference_compiled_case() -> list[str]:
    """A megakernel built and compiled under ``torch.inference_mode`` (as a server might at
    start-up) runs inside it and outside it, traced: its state is no inference tensor."""
    x, z, tiles = _tensors(100)
    with torch.inference_mode():
        mk = _scale_reverse("inference", x, z).compile(trace=True)
    modes = []
    for mode in ("inference", "plain", "inference", "plain"):
        x.copy_(torch.randn(x.numel()))
        z.fill_(float("nan"))
        with torch.inference_mode(mode == "inference"):
            mk()
        assert torch.equal(z.cpu(), (3.0 * x).flip(0).cpu()), mode
        assert len(mk.last_trace) == 2 * tiles, mode
        modes.append(mode)
    return modes


def test_compiled_under_inference_mode(backend):
    res = ditron.launch(_inference_compiled_case, 2, backend=backend)
    assert res == [["inference", "plain", "inference", "plain"]] * 2


def _default_device_case() -> list[str]:
    """A megakernel built and called under a default device (``meta``, which holds no data,
    and the ranks' own, as GPU code sets it): its host-side tables stay on the host."""
    x, z, tiles = _tensors(100)
    done = []
    for device in ("meta", ditron.world().device):
        with torch.device(device):
            mk = _scale_reverse(f"default {device}", x, z).compile(trace=True)
            for call in range(2):
                x.copy_(torch.randn(x.numel(), device=x.device))
                z.fill_(float("nan"))
                mk()
                assert torch.equal(z.cpu(), (3.0 * x).flip(0).cpu()), (device, call)
                assert len(mk.last_trace) == 2 * tiles, (device, call)
        done.append(torch.device(device).type)
    return done


def test_built_and_called_under_a_default_device(backend):
    kinds = ["meta", "cuda" if backend == "cuda" else "cpu"]
    assert ditron.launch(_default_device_case, 2, backend=backend) == [kinds] * 2


def _compiled_caller_case() -> int:
    """``mk()`` and ``ditron.barrier()`` inside a ``torch.compile``'d function: graph
    breaks around them, the torch ops between compiled (Dynamo used to fail on them)."""
    torch._dynamo.reset()
    x, z, _ = _tensors(100)
    mk = _scale_reverse("compiled caller", x, z).compile()

    def step(v):
        x.copy_(v + 1)
        mk()
        ditron.barrier()
        return z * 2

    compiled = torch.compile(step, backend="aot_eager")
    for call in range(2):
        v = torch.randn(x.numel(), device=x.device)
        assert torch.allclose(compiled(v), (6 * (v + 1)).flip(0)), f"call {call}"
    return mk.calls


def test_called_from_compiled_code(backend):
    assert ditron.launch(_compiled_caller_case, 2, backend=backend) == [2, 2]


@pytest.mark.parametrize("programs", [None, 3])
def test_chain_with_tile_orders_and_programs(programs, backend):
    res = ditron.launch(_chain_case, 2, programs, backend=backend)
    assert all(p >= 1 for p in res)
    if programs is not None:
        assert res == [programs] * 2


def _lonely_megakernel():
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

    w = ditron.world()
    x = torch.randn(16, 32, device=w.device)
    wg, wu, wd = torch.randn(32, 16), torch.randn(32, 16), torch.randn(16, 32)
    g = dt.TaskGraph("lonely")
    # items on each rank: up 0, down 1 and 2 (they push into rank 1 too), reduce 3
    add_tp_mlp(g, x, wg.to(w.device), wu.to(w.device), wd.to(w.device), torch.empty_like(x),
               blocks=MlpBlocks(16, 16, 16, 32))
    mk = g.compile()
    assert mk.schedule.n_items == 4
    return mk


def _missing_rank_case() -> None:
    mk = _lonely_megakernel()
    if ditron.world().rank == 0:
        mk()  # rank 1 never calls


# rank 0 waits for rank 1's start (its down tiles push into rank 1) and, on a GPU where
# programs run side by side, for rank 1's down tiles and its own (its reduce tile): which
# wait gives up first is a race, but the chain the message gives always ends at rank 1
TIMEOUT_MESSAGE = (r"rank 0: wait on signal megakernel:lonely\[\d+\] \((task 'mlp\.\w+' tile "
                   r"\d+ on rank 0; it waits for )*(the start of rank 1's call|task 'mlp.down' "
                   r"tile \d+ on rank 1), call 1\) .*expected >= 1, saw 0")


def test_wait_timeout_names_the_tile(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0.5")
    with pytest.raises(ditron.WaitTimeoutError, match=TIMEOUT_MESSAGE):
        ditron.launch(_missing_rank_case, 2, backend=backend)


def _timeout_chain_case() -> list[str] | None:
    mk = _lonely_megakernel()
    if ditron.world().rank != 0:
        return None
    with pytest.raises(ditron.WaitTimeoutError):
        mk()  # rank 1 never calls

    def explain(slot: int) -> str:  # as if rank 0's wait for its own item had given up
        return str(mk._explain(ditron.WaitTimeoutError(0, f"megakernel:lonely[{slot}]", 1, 0,
                                                       0.5)))

    return [explain(3), explain(1)]


def test_wait_timeout_on_an_own_tile_names_what_it_waits_for(backend, monkeypatch):
    monkeypatch.setenv("DITRON_WAIT_TIMEOUT", "0.5")
    reduce, down = ditron.launch(_timeout_chain_case, 2, backend=backend)[0]
    assert re.search(TIMEOUT_MESSAGE, reduce) and re.search(TIMEOUT_MESSAGE, down)
    # the reduce tile waits for both ranks' down tiles; rank 0's ran (after their own
    # waits gave up), rank 1's never did
    assert "(task 'mlp.reduce' tile 0 on rank 0; it waits for task 'mlp.down' tile 0 on " \
           "rank 1, call 1)" in reduce
    assert "(task 'mlp.down' tile 0 on rank 0; it waits for the start of rank 1's call, " \
           "call 1)" in down


def _different_graphs_case() -> None:
    w = ditron.world()
    x = torch.empty(64, device=w.device)
    g = dt.TaskGraph("differs")
    g.add("scale", _scale_tile, x, x, 64, 2.0, 16, tiles=4 + w.rank,
          writes=lambda t, r: [dt.region(x, (t * 16, t * 16 + 16))])
    g.compile()


def test_ranks_building_different_graphs_raise(backend):
    with pytest.raises(ValueError, match=r"(?s)graph 'differs': ranks disagree on the call "
                       r"\(tiles differs\):.*rank 1: .*tiles=\(5,\)"):
        ditron.launch(_different_graphs_case, 2, backend=backend)


def _bad_compile_case() -> int:
    w = ditron.world()
    x = torch.empty(64, device=w.device)
    g = dt.TaskGraph("bad")
    g.add("scale", _scale_tile, x, x, 64, 2.0, 16, tiles=4)
    with pytest.raises(ValueError, match="compile: programs must be a positive int"):
        g.compile(programs=0)
    with pytest.raises(ValueError, match=r"compile: num_warps: warps must be None or one of "
                                         r"\(1, 2, 4, 8, 16, 32\), got 6"):
        g.compile(num_warps=6)
    # the launch takes the most warps a task asks for, unless compile is told
    wide = dt.TaskGraph("wide")
    wide.add("scale", _scale_tile, x, x, 64, 2.0, 16, tiles=4, warps=8)
    assert wide.compile().launch_options["num_warps"] == 8
    assert wide.compile(num_warps=2).launch_options["num_warps"] == 2
    assert g.compile().launch_options["num_warps"] == 4
    # a remote region of a tensor that is not symmetric
    far = dt.TaskGraph("far")
    far.add("w", _scale_tile, x, x, 64, 2.0, 16, tiles=1,
            writes=lambda t, r: [dt.region(x, rank=(r + 1) % 2)])
    with pytest.raises(ValueError, match="not symmetric"):
        far.compile()
    # an argument on another device, as a tensor or as the tensor of a TMA descriptor
    elsewhere = torch.empty(16, 16, device="meta")
    for arg in (elsewhere, TensorDescriptor(elsewhere, [16, 16], [16, 1], [16, 16])):
        odd = dt.TaskGraph("odd")
        odd.add("scale", _scale_tile, arg, x, 64, 2.0, 16, tiles=1)
        with pytest.raises(ValueError, match=f"task 'scale': argument 'x' is on meta, the "
                                             f"world computes on {w.device}"):
            odd.compile()
    return 2


def test_bad_compiles_raise_before_any_kernel(backend):
    assert ditron.launch(_bad_compile_case, 2, backend=backend) == [2, 2]


def _matmul_case(M: int, N: int, K: int, dtype) -> int:
    from ditron.kernels import tiles

    poison_empty()
    dev = ditron.world().device
    a = torch.randn(M, K, dtype=dtype, device=dev)
    b = torch.randn(N, K, dtype=dtype, device=dev).t()  # a transposed weight
    c = torch.empty(M, N, dtype=dtype, device=dev)
    bm, bn, bk = 16, 32, 32
    g = dt.TaskGraph("matmul")
    upcast = ditron.world().backend == "cpu"
    g.add("mm", tiles.matmul_tile, a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
          bm, bn, bk, "ieee" if dtype == torch.float32 else "tf32", upcast,
          tiles=tiles.num_tiles(M, N, bm, bn))
    g.compile()()
    _close("matmul", c, a.double() @ b.double())
    return 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_tile(dtype, backend):
    assert ditron.launch(_matmul_case, 1, 33, 70, 45, dtype, backend=backend) == [1]
    # 10 row blocks: a full group of the grouped tile order, then a short one
    assert ditron.launch(_matmul_case, 1, 150, 40, 20, dtype, backend=backend) == [1]


@pytest.mark.gpu
def test_tp_mlp_stack_gpu():
    from ditron.task.tp_mlp import MlpBlocks, default_blocks

    # two ranks sharing the GPU (half its SMs each), then one rank with a decode-size layer
    blocks = MlpBlocks()
    res = ditron.launch(_mlp_case, 2, 8, 512, 352, 3, torch.bfloat16, 4, blocks,
                        backend="cuda")
    assert res == [4, 4]
    res = ditron.launch(_mlp_case, 1, 16, 2048, 2816, 2, torch.bfloat16, 3, blocks,
                        backend="cuda")
    assert res == [3]
    # 64-row tiles pipelined 4 deep (the tuner's pick for 64 tokens), 60 tokens
    res = ditron.launch(_mlp_case, 1, 60, 1024, 1408, 2, torch.bfloat16, 2,
                        MlpBlocks(64, 128, 64, 256, 4, stages=4), backend="cuda")
    assert res == [2]
    # the default for 100 tokens: one 128-row block, 8 warps; grouped tile order on 2 ranks
    res = ditron.launch(_mlp_case, 1, 100, 1024, 1408, 2, torch.bfloat16, 2,
                        default_blocks(100), backend="cuda")
    assert res == [2]
    res = ditron.launch(_mlp_case, 2, 100, 512, 704, 2, torch.bfloat16, 2,
                        MlpBlocks(32, 64, 64, 128, 2, warps=8), False, True, 4,
                        backend="cuda")
    assert res == [2, 2]
    # loads through pointers (by default through TMA descriptors on an H200, above), and
    # 130 tokens: a partial second 128-row block
    res = ditron.launch(_mlp_case, 2, 40, 512, 704, 2, torch.bfloat16, 3,
                        MlpBlocks(16, 64, 64, 128, 2, tma=False), False, True, 0,
                        backend="cuda")
    assert res == [3, 3]
    res = ditron.launch(_mlp_case, 1, 130, 1024, 1408, 2, torch.bfloat16, 2,
                        default_blocks(130), False, True, 4, backend="cuda")
    assert res == [2]


def _mlp_case_in(inference: bool, *args) -> int:
    """``_mlp_case`` with everything (build, compile, capture, replays) under
    ``torch.inference_mode(inference)``, as a serving engine captures its graphs."""
    with torch.inference_mode(inference):
        return _mlp_case(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size, inference", [(1, False), (2, False), (2, True)])
def test_megakernel_in_cuda_graph(world_size, inference):
    from ditron.task.tp_mlp import MlpBlocks

    # one eager call, then replays of a captured call on fresh inputs (ranks share the GPU)
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=64, reduce_n=128)
    res = ditron.launch(_mlp_case_in, world_size, inference, 20, 264, 200, 2, torch.bfloat16,
                        4, blocks, True, backend="cuda")
    assert res == [4] * world_size


@triton.jit
def _push_to_peer_tile(tile, src, box, n, ctx, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    peer = ctx.rank ^ 1
    dl.store(box + offs, tl.load(src + offs, mask=offs < n), peer, ctx, mask=offs < n)


@triton.jit
def _double_tile(tile, box, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, 2 * tl.load(box + offs, mask=offs < n), mask=offs < n)


def _two_nodes_case() -> int:
    """Simulated nodes of two ranks: each rank pushes into its node peer's symmetric box,
    which doubles it; three calls."""
    poison_empty()
    w = ditron.world()
    assert w.local_world_size == 2
    n = 40
    src = torch.empty(n, device=w.device)
    box = ditron.empty(n, torch.float32)
    out = torch.empty(n, device=w.device)
    g = dt.TaskGraph("nodes")
    g.add("push", _push_to_peer_tile, src, box, n, dt.CTX, 64, tiles=1,
          reads=lambda t, r: [dt.region(src)], writes=lambda t, r: [dt.region(box, rank=r ^ 1)])
    g.add("double", _double_tile, box, out, n, 64, tiles=1,
          reads=lambda t, r: [dt.region(box)], writes=lambda t, r: [dt.region(out)])
    mk = g.compile()
    for call in range(3):
        src.copy_(torch.arange(n) + 100.0 * (w.rank ^ 1) + call)  # what the peer expects
        out.fill_(float("nan"))
        mk()
        expected = 2 * (torch.arange(n) + 100.0 * w.rank + call)
        assert torch.equal(out.cpu(), expected), f"call {call}"
    return 3


def test_two_simulated_nodes(monkeypatch):
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")
    assert ditron.launch(_two_nodes_case, 4, backend="cpu") == [3] * 4


def _rank_dependent_regions_case(mode: str) -> str:
    """Each rank pushes its row of ``src`` into its right neighbour's ``inbox``, which
    doubles the row its left neighbour pushed. ``mode="closure"``: the push's box is
    computed from the rank running the code instead of the ``rank`` argument, so each
    rank derives other pushes than its peers do: its ``use`` tile did not wait for its
    left neighbour's push and read a stale row, silently. ``mode="invalid"``: only rank 1's
    regions are invalid (two tiles of a task clash): rank 1 raised while the others waited
    in the compile's barrier until the launch timed out."""
    w = ditron.world()
    W, me, n = w.world_size, w.rank, 16
    src, out = torch.empty(n, device=w.device), torch.empty(n, device=w.device)
    inbox = ditron.zeros(W * n, torch.float32)
    g = dt.TaskGraph(f"rank dependent {mode}")
    slot = me if mode == "closure" else None

    def push_writes(t, r):
        s = r if slot is None else slot
        return dt.region(inbox, (s * n, s * n + n), rank=(r + 1) % W)

    def use_reads(t, r):
        if mode == "invalid" and me == 1:
            return dt.region(inbox)  # and so do the other tiles of "use": no clash yet
        left = (r - 1) % W
        return dt.region(inbox, (left * n, left * n + n))

    g.add("push", _push_right_tile, src, inbox, n, dt.CTX, 16, tiles=1,
          reads=lambda t, r: dt.region(src), writes=push_writes)
    g.add("use", _use_left_tile, inbox, out, n, dt.CTX, 16, tiles=2,
          reads=use_reads,
          writes=lambda t, r: dt.region(out) if mode == "invalid" and me == 1
          else dt.region(out, (t * 8, t * 8 + 8)))
    try:
        mk = g.compile()
    except ValueError as exc:
        return str(exc)
    left = (me - 1) % W
    for call in range(3):
        src.copy_(torch.arange(n) + 100.0 * me + call)
        out.fill_(float("nan"))
        mk()
        assert torch.equal(out.cpu(), 2 * (torch.arange(n) + 100.0 * left + call)), call
    return "ran"


@triton.jit
def _push_right_tile(tile, src, inbox, n, ctx, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    right = (ctx.rank + 1) % ctx.world_size
    dl.store(inbox + ctx.rank * n + offs, tl.load(src + offs, mask=offs < n), right, ctx,
             mask=offs < n)


@triton.jit
def _use_left_tile(tile, inbox, out, n, ctx, BLOCK: tl.constexpr):
    offs = tile * 8 + tl.arange(0, BLOCK)
    mask = (offs < n) & (offs < tile * 8 + 8)
    left = (ctx.rank + ctx.world_size - 1) % ctx.world_size
    tl.store(out + offs, 2 * tl.load(inbox + left * n + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_deriving_different_dependencies_raise_on_every_rank(world_size, backend,
                                                                   monkeypatch):
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")  # the old code hung in "invalid"
    assert ditron.launch(_rank_dependent_regions_case, world_size, "right",
                         backend=backend) == ["ran"] * world_size
    got = ditron.launch(_rank_dependent_regions_case, world_size, "closure", backend=backend)
    for msg in got:
        assert re.match(r"ditron.task: compile of graph 'rank dependent closure': ranks 0 and "
                        r"1 derive different dependencies between them .*from the rank "
                        r"running the code\):\n  only rank 0 derives: task 'push' tile 0 on "
                        r"rank 0 -> task 'use' tile 0 on rank 1", msg, re.S), msg
    got = ditron.launch(_rank_dependent_regions_case, world_size, "invalid", backend=backend)
    clash = "task 'use': tile 0 on rank 0 and tile 1 on rank 0 access an overlapping box"
    assert got[1].startswith(clash), got[1]
    for r, msg in enumerate(got):
        if r != 1:
            assert msg.startswith("ditron.task: compile of graph 'rank dependent invalid': a "
                                  "rank refused the call's arguments:\n  rank 1: ValueError: "
                                  f"{clash}"), msg


def _freed_case() -> list[int]:
    heap = ditron.runtime.world.current().heap
    x, z, _ = _tensors(40)
    _scale_reverse("first", x, z).compile().free()  # the barrier's own pad stays
    before = heap.used_bytes
    used = []
    for _ in range(3):
        mk = _scale_reverse("freed", x, z).compile()
        mk()
        used.append(heap.used_bytes - before)
        mk.free()
        mk.free()  # twice: nothing more
        with pytest.raises(RuntimeError, match="megakernel of graph 'freed' was freed"):
            mk()
    used.append(heap.used_bytes - before)
    return used


def test_freed_megakernel_returns_its_scoreboard(backend):
    """Each compile allocates a scoreboard in the symmetric heap, which no call freed:
    compiling graphs in a loop (the tuner does, per candidate) leaked the heap."""
    got = ditron.launch(_freed_case, 2, backend=backend)
    assert got[0] == got[1] and got[0][0] > 0 and got[0] == got[0][:1] * 3 + [0], got


@triton.jit
def _add_by_index_tile(i, x, tile, BLOCK: tl.constexpr):
    """A tile function whose index is ``i`` and which has a parameter named ``tile``."""
    offs = i * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + tile + i)


def _tile_named_parameter_case() -> list[float]:
    x = torch.zeros(32, device=ditron.world().device)
    got = []
    for outline in (True, False):
        g = dt.TaskGraph(f"named tile {outline}")
        g.add("a", _add_by_index_tile, x, 5.0, 16, tiles=2,
              writes=lambda t, r: dt.region(x, (16 * t, 16 * t + 16)))
        g.compile(outline=outline)()
        got += [x[0].item(), x[16].item()]
    return got


def test_tile_function_with_a_parameter_named_tile(backend):
    # the out-of-line caller named the tile index "tile" whatever the tile function called
    # it: "SyntaxError: duplicate argument 'tile' in function definition"
    assert ditron.launch(_tile_named_parameter_case, 1, backend=backend) == [[5, 6, 10, 12]]


def test_tp_mlp_with_no_ffn_columns(backend):
    from ditron.task.tp_mlp import MlpBlocks

    # a rank's shard of 0 ffn columns: each layer adds all_reduce(0) to its residual
    # (the down task's K chunks were sized by dividing by 0: ZeroDivisionError)
    blocks = MlpBlocks(block_m=16, block_n=32, block_k=16, reduce_n=64, split_k=2)
    res = ditron.launch(_mlp_case, 2, 20, 72, 0, 2, torch.float32, 2, blocks, backend=backend)
    assert res == [2, 2]


def _odd_names_case() -> list[float]:
    from ditron.task import codegen

    x = torch.ones(16, device=ditron.world().device)
    modules, kernels = [], []  # a module is shared by the megakernels alive
    for name in ('say """hi"""', "C:\\Nodes\\x", "layer0.scale\n"):
        g = dt.TaskGraph("names")
        g.add(name, _scale_tile, x, x, 16, 2.0, 16, tiles=1,
              writes=lambda t, r: dt.region(x))
        kernels.append(g.compile())
        kernels[-1]()
        modules.append(codegen.load(g.tasks))
    assert modules[0] is modules[1] is modules[2]  # one module (and kernel) for all three
    return x[:2].tolist()


def test_task_names_do_not_enter_the_kernel_source(backend):
    # the names were in the generated kernel's docstring: a quote or a backslash broke the
    # source (SyntaxError), and graphs of the same tile functions under other names got
    # modules (and compiled kernels) of their own
    assert ditron.launch(_odd_names_case, 1, backend=backend) == [[8.0, 8.0]]


def _one_rank_refuses_case() -> list[str]:
    w = ditron.world()
    x = torch.empty(64, device=w.device)
    got = []
    for how in ("programs", "device"):
        g = dt.TaskGraph("refused")
        arg = torch.empty(64, device="meta") if how == "device" and w.rank == 1 else x
        g.add("scale", _scale_tile, arg, x, 64, 2.0, 16, tiles=4)
        with pytest.raises(ValueError) as info:
            g.compile(programs=0 if how == "programs" and w.rank == 1 else None)
        got.append(str(info.value))
    return got


def test_a_rank_refusing_its_compile_arguments_raises_on_every_rank(backend, monkeypatch):
    # rank 1's bad programs / argument device raised there while rank 0 waited in the
    # compile's agreement until the launch timed out
    monkeypatch.setenv("DITRON_LAUNCH_TIMEOUT", "60")
    got = ditron.launch(_one_rank_refuses_case, 2, backend=backend)
    problems = ("compile: programs must be a positive int, got 0",
                "task 'scale': argument 'x' is on meta")
    for msg, problem in zip(got[0], problems, strict=True):
        assert msg.startswith(f"ditron.task: compile of graph 'refused': a rank refused the "
                              f"call's arguments:\n  rank 1: ValueError: {problem}"), msg
    for msg, problem in zip(got[1], problems, strict=True):  # its own error
        assert msg.startswith(problem), msg


def _wide_operand_case(path: str) -> str:
    from ditron.task.tp_mlp import MlpBlocks, add_tp_mlp

    n = 2**31 + 4096  # a sparse file mapping: no page of it is touched
    with open(path, "wb") as f:
        f.truncate(4 * n)
    store = torch.from_file(path, shared=True, size=n, dtype=torch.float32)
    x = store.as_strided((3, 32), (2**30, 1))  # row 2 starts past 2**31 elements
    wg, wu, wd = torch.randn(32, 16), torch.randn(32, 16), torch.randn(16, 32)
    with pytest.raises(ValueError, match=r"add_tp_mlp: x \(3, 32\) with strides "
                       r"\(1073741824, 1\) spans 2147483680 elements; the task tiles "
                       r"compute int32 element offsets"):
        add_tp_mlp(dt.TaskGraph("wide"), x, wg, wu, wd, torch.empty(3, 32),
                   blocks=MlpBlocks(16, 16, 16, 32))
    return "refused"


def test_tp_mlp_refuses_operands_past_int32_offsets(tmp_path):
    """The task tiles compute int32 element offsets: an operand spanning more than 2**31
    elements wrapped (a crash on the CPU backend, wrong memory on a GPU); now refused when
    the MLP is added, before any kernel."""
    assert ditron.launch(_wide_operand_case, 1, str(tmp_path / "sparse"),
                         backend="cpu") == ["refused"]
