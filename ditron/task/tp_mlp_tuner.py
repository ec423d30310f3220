"""Tile sizes of the tensor-parallel MLP (``tp_mlp.MlpBlocks``) chosen by measurement.

``tune_mlp`` builds the megakernel of a stack of ``layers`` MLPs once per candidate and
times them with the tuner's protocol (``tune/tuner.py``: fixed warm-up and sample counts on
every rank, rounds whose order rotates, the slowest rank's median). The fastest candidate is
cached (``tune/cache.py``) under the shapes one rank's ``add_tp_mlp`` sees, the dtype, the
world size, the device and the weights' layout (``nn.Linear``'s, whose ``.t()`` the MLP
multiplies by, or row-major: the tiles' speeds depend on which dimension is contiguous), and
``add_tp_mlp(..., blocks=None)`` uses it from then on for weights laid out so. The
untuned default (``tp_mlp.default_blocks(tokens)``) stays unless another candidate beats it
by ``MARGIN`` (``DITRON_TUNE_MARGIN``): a gain inside the run-to-run noise is not taken.
Like ``tune``, it checks its arguments and the margin on every rank and agrees on them
before building anything (``_checked`` under ``refused_together``, then ``agree``).
"""

from __future__ import annotations

import dataclasses
import itertools

import torch
import torch.distributed as dist

from ..runtime.agreement import agree, rank0_decides, refused_together
from ..runtime.heap import HeapExhausted
from ..runtime.integers import check_int
from ..runtime.symmetric import empty, free
from ..runtime.world import current
from ..tune import cache
from ..tune.decisions import key_for
from ..tune.tuner import (
    TUNED_LAYOUTS,
    StatusLine,
    agreed_median,
    all_ok,
    say,
    time_in_rounds,
    tune_margin,
)
from .graph import DEFAULT_WARPS, TaskGraph
from .megakernel import Megakernel
from .tp_mlp import (
    DTYPES,
    TUNED_OP,
    MlpBlocks,
    add_tp_mlp_stack,
    default_blocks,
    inbox_shape,
    shared_memory,
)

#: (block_n, block_k) tried on GPUs, the default's first: wide tiles read long contiguous
#: runs of the weights (docs/perf.md, session 31); 64 x 256 keeps their bytes per pipeline
#: stage on twice as many tiles: 11-13% less GPU time on layers too small to fill the
#: GPU (session 34)
GPU_TILES = ((128, 128), (64, 128), (128, 64), (256, 64), (64, 256))
#: down-GEMM reduction splits tried on GPUs
GPU_SPLITS = (2, 4, 8)
#: the GEMM loops' pipeline depths tried on GPUs (``MlpBlocks.stages``; ``None``: the
#: megakernel's): one deeper than the default paid 11% at 64 tokens (docs/perf.md, session 33)
GPU_STAGES = (None, 4)
#: num_warps tried on GPUs (``MlpBlocks.warps``; ``None``: the megakernel's 4), 8 only for
#: tiles of at least ``WIDE_ROWS`` rows: it paid 25% at 128 tokens, and cost 5% at 16
#: (docs/perf.md, session 35)
GPU_WARPS = (None, 8)
WIDE_ROWS = 64
#: the widest ``down_n`` tried (a TMA box's limit): down tiles of 256 columns next to 128-wide
#: SwiGLU tiles cost 5% less GPU time at 512 tokens, 8-9% more at 128 and 256 (docs/perf.md,
#: session 39)
WIDE_DOWN_MAX = 256
#: the most rows a tile gets: 128 rows read the weights once for up to 128 tokens
MAX_ROWS = 128
#: fp32 accumulator registers per thread a candidate may need (the SwiGLU tile holds two
#: ``block_m x block_n`` ones): beyond that they spill (4x slower, session 35)
ACC_REGS = 128


def candidates(tokens: int, hidden: int, ffn: int, dtype: torch.dtype,
               device: torch.device) -> list[MlpBlocks]:
    """The configurations ``tune_mlp`` tries for one rank's shapes (``ffn``: this rank's
    columns), ``default_blocks`` first. On GPUs: for each depth of ``GPU_STAGES``
    and warp count of ``GPU_WARPS``, ``block_m`` the power of two covering the tokens and
    half that (16 to ``MAX_ROWS``), each with the tiles of ``GPU_TILES`` whose SwiGLU tile
    fits in shared memory at that depth and in ``ACC_REGS`` registers at that warp count,
    and the splits of ``GPU_SPLITS``; from ``WIDE_ROWS`` rows also the default's tiles with
    down tiles twice as wide (``MlpBlocks.down_n``) at each split. On the CPU: three small
    configurations (for tests; the interpreter's times say little)."""
    if device.type != "cuda":
        return [MlpBlocks(16, 16, 16, 32, 1), MlpBlocks(16, 32, 16, 32, 2),
                MlpBlocks(16, 16, 32, 32, 2, stages=2)]
    cover = 1 << max(tokens - 1, 1).bit_length()  # the power of two covering the tokens
    rows = sorted({min(MAX_ROWS, max(16, cover >> i)) for i in (0, 1)})
    smem = shared_memory(device)
    first = default_blocks(tokens, dtype, smem)
    splits = sorted(GPU_SPLITS, key=lambda s: s != first.split_k)
    out = [first]
    for stages, warps, bm in itertools.product(GPU_STAGES, GPU_WARPS, rows):
        threads = 32 * (warps or DEFAULT_WARPS)
        if warps is not None and bm < WIDE_ROWS:
            continue
        for bn, bk in GPU_TILES:
            if 2 * bm * bn > ACC_REGS * threads:
                continue
            tile = MlpBlocks(bm, bn, bk, first.reduce_n, 1, stages, warps)
            if tile.smem_bytes(dtype.itemsize) > smem:
                continue
            out += [b for s in splits
                    if (b := dataclasses.replace(tile, split_k=s)) != first]
    if first.block_m >= WIDE_ROWS and 2 * first.block_n <= WIDE_DOWN_MAX:
        # the default tiles with down tiles as wide as both SwiGLU blocks (same registers,
        # same shared memory per stage)
        out += [dataclasses.replace(first, split_k=s, down_n=2 * first.block_n)
                for s in splits]
    return out


def _checked(tokens: int, hidden: int, ffn: int, dtype: torch.dtype, layers: int,
             configs, warmup: int, iters: int, batch: int | None, programs: int | None,
             layout: str, W: int, dev: torch.device) -> tuple:
    """:func:`tune_mlp`'s arguments checked on this rank (``ValueError`` naming the first bad
    one): ``tokens, hidden, ffn, layers`` as ints, the configurations (default
    :func:`candidates`), ``warmup, iters, batch, programs`` as ints (``batch`` defaulted),
    and the margin (``DITRON_TUNE_MARGIN``)."""
    tokens, hidden, ffn, layers = (check_int(v, f"tune_mlp: {name}", 1) for name, v in (
        ("tokens", tokens), ("hidden", hidden), ("ffn", ffn), ("layers", layers)))
    if ffn % W:
        raise ValueError(f"tune_mlp: ffn {ffn} does not divide by the world size {W}")
    if dtype not in DTYPES:
        raise ValueError(f"tune_mlp: dtype must be one of {', '.join(map(str, DTYPES))} "
                         f"(the MLP's), got {dtype!r}")
    if layout not in TUNED_LAYOUTS:
        raise ValueError(f"tune_mlp: layout must be one of {', '.join(TUNED_LAYOUTS)} (the "
                         f"weights as nn.Linear's .t(), row-major), got {layout!r}")
    if configs is None:
        configs = candidates(tokens, hidden, ffn // W, dtype, dev)
    elif not isinstance(configs, (list, tuple)) or not all(
            isinstance(c, MlpBlocks) for c in configs):
        raise ValueError(f"tune_mlp: configs must be a list of MlpBlocks, got {configs!r}")
    if not configs:
        raise ValueError("tune_mlp: no candidate configuration")
    warmup = check_int(warmup, "tune_mlp: warmup")
    iters = check_int(iters, "tune_mlp: iters", 1)
    batch = check_int(batch, "tune_mlp: batch", 1) if batch is not None else (
        8 if dev.type == "cuda" else 1)
    if programs is not None:
        programs = check_int(programs, "tune_mlp: programs", 1)
    return (tokens, hidden, ffn, layers, list(configs), warmup, iters, batch, programs,
            tune_margin())


def tune_mlp(tokens: int, hidden: int, ffn: int, dtype: torch.dtype = torch.bfloat16, *,
             layers: int = 2, configs: list[MlpBlocks] | None = None, warmup: int = 3,
             iters: int = 24, batch: int | None = None, programs: int | None = None,
             progress: bool = True, save: bool = True, layout: str = "t") -> MlpBlocks:
    """Time the megakernel of ``layers`` chained MLPs (``tokens`` x ``hidden`` input,
    ``ffn`` the whole MLP's width, split over the ranks; weights stored as ``nn.Linear``
    keeps them, the ``[in, out]`` operands their ``.t()``, or with ``layout="n"`` row-major
    ``[in, out]`` tensors: the choice serves ``add_tp_mlp`` calls whose three weights are
    laid out so, ``tune.decisions.common_layout``) for each of ``configs`` (default
    :func:`candidates`) and return the fastest, cached for ``add_tp_mlp`` unless ``save`` is
    false (collective: every rank calls it with the same arguments). Each candidate gets
    ``iters`` samples of ``batch`` calls back to back (default 8 on GPU, 1 on CPU), in
    rounds whose order rotates; a candidate that fails to build or compile on any rank
    drops out on every rank; where every one does, or the timing raises (on any rank: a
    wait that timed out, a device error), the candidates' inboxes and megakernels are freed
    and every rank raises (the error, or ``RuntimeError`` where it was another rank's).
    ``programs`` goes to ``TaskGraph.compile``. Bad arguments (shapes the world size does
    not divide, a dtype the MLP does not compute in, counts, a ``layout`` other than
    ``"t"`` or ``"n"``, ``DITRON_TUNE_MARGIN`` too, and with ``save``
    ``DITRON_CACHE_VERSIONS``) raise ``ValueError``
    before anything is built or timed, on every rank (a rank refusing its own names itself
    to its peers), and so do arguments or margins that differ between ranks.
    ``progress``: rank 0 shows its progress on stderr as ``tune`` does (on a terminal one
    status line rewritten in place, in a log a line per step), then the times.
    Rank 0 writes the cache (``add_tp_mlp`` reads rank 0's for every rank): where that
    fails, it raises ``tune.cache.CacheError`` and the other ranks ``RuntimeError``."""
    rt = current()
    w = rt.world
    W, dev = w.world_size, w.device
    # collective: a rank refusing its arguments, or ranks passing different ones, raise on
    # every rank here, not in (or past) the first candidate's build or timing
    with refused_together("tune_mlp"):
        tokens, hidden, ffn, layers, configs, warmup, iters, batch, programs, margin = (
            _checked(tokens, hidden, ffn, dtype, layers, configs, warmup, iters, batch,
                     programs, layout, W, dev))
        if save:  # rank 0's write would refuse it after the timing
            cache.versions_kept()
    agree("tune_mlp", remember=False, tokens=tokens, hidden=hidden, ffn=ffn, dtype=dtype,
          layers=layers, configs=tuple(configs), warmup=warmup, iters=iters, batch=batch,
          programs=programs, margin=margin, layout=layout)
    F = ffn // W
    g = torch.Generator().manual_seed(1)  # the replicated input
    x = torch.randn(tokens, hidden, generator=g).to(dev, dtype)
    g.manual_seed(100 + w.rank)
    weights = [tuple((torch.randn(n, k, generator=g) / k ** 0.5).to(dev, dtype).t()
                     if layout == "t" else (torch.randn(k, n, generator=g) / k ** 0.5).to(
                         dev, dtype)
                     for k, n in ((hidden, F), (hidden, F), (F, hidden)))
               for _ in range(layers)]
    show = progress and w.rank == 0
    status = StatusLine(show)
    runs, scratch, errors = {}, [], {}
    # one inbox for the candidates, as large as the largest needs where the heap holds it
    # (each holding its own, those built after the heap filled dropped out): their calls
    # follow each other, and a call's peers write into a rank's inbox only once it has
    # started that call
    rows = [_inbox_rows(tokens, hidden, F, W, blocks) for blocks in configs]
    inbox = _shared_inbox(rows, hidden, dtype)
    if inbox is not None:
        scratch.append(inbox)
    for i, blocks in enumerate(configs):
        status.show(f"[ditron tune] tp_mlp tokens={tokens} hidden={hidden} ffn={ffn}: build "
                    f"{i + 1}/{len(configs)} {blocks.label()}")
        try:
            shared = inbox is not None and 0 < rows[i] <= inbox.shape[0]
            run = _build(x, weights, blocks, programs, scratch,
                         inbox[:rows[i]] if shared else None)
            run()  # compiles
        except Exception as exc:  # noqa: BLE001 - a config that does not compile loses
            errors[i] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        if all_ok(i not in errors):
            runs[i] = run
        else:
            errors.setdefault(i, "failed on another rank")
    status.done()
    if not runs:  # every rank knows (all_ok): release together, then raise
        _release(scratch)
        raise RuntimeError(f"tune_mlp: every candidate failed: {errors}")
    failed = None
    try:
        samples = time_in_rounds(runs, 1, iters, warmup, dev, batch)
    except Exception as exc:  # noqa: BLE001 - agreed below: every rank frees, then raises
        failed = exc
    if not all_ok(failed is None):  # the inboxes and scoreboards leaked: the heap filled
        del runs
        _release(scratch)
        raise failed or RuntimeError("tune_mlp: timing the candidates failed on another rank")
    times = {i: agreed_median(samples[i]) for i in runs}
    best = min(times, key=times.get)
    if 0 in times and times[best] > times[0] * (1.0 - margin):
        best = 0
    if show:
        for i, blocks in enumerate(configs):
            shown = f"{times[i]:10.1f} us" if i in times else f"    failed    ({errors[i]})"
            mark = "  <-" if i == best else ""
            say(f"[ditron tune]   {shown}  {blocks.label()}{mark}")
    del runs
    _release(scratch)
    chosen = configs[best]

    def saved() -> None:
        if save:
            cache.put(key_for(TUNED_OP, tokens, hidden, F, dtype, W, layout),
                      {"blocks": dataclasses.asdict(chosen), "time_us": times[best],
                       "default_us": times.get(0), "layers": layers})

    # rank 0 writes its cache, which add_tp_mlp reads for every rank; the other ranks wait
    # for it (the cache holds the choice before any rank builds with it), and raise naming
    # its error where the write fails instead of waiting for it
    rank0_decides("tune_mlp: caching the choice", saved)
    return chosen


def _release(scratch: list) -> None:
    """Free the candidates' inbox and megakernels (their scoreboards), in the order they
    were allocated, once every rank's calls have ended (collective)."""
    rt = current()
    dev = rt.world.device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    if rt.world.world_size > 1:  # on the host: no rank pushes into an inbox any more
        dist.barrier(group=rt.host_group)
    for held in scratch:
        if isinstance(held, torch.Tensor):
            free(held)
        else:
            held.free()


def _inbox_rows(tokens: int, hidden: int, F: int, W: int, blocks: MlpBlocks) -> int:
    """The inbox rows the candidate ``blocks`` needs (``tp_mlp.inbox_shape``); 0 for tiles
    ``add_tp_mlp`` refuses (the candidate drops out when built)."""
    try:
        return inbox_shape(tokens, hidden, F, W, blocks)[0]
    except (TypeError, ValueError):
        return 0


def _shared_inbox(rows: list[int], hidden: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The candidates' inbox: of the most ``rows`` the symmetric heap holds (candidate ``i``
    takes its first ``rows[i]``; one needing more makes its own, and drops out if the heap
    refuses it), ``None`` where none fits (collective: the heap's refusal is agreed)."""
    for n in sorted({r for r in rows if r}, reverse=True):
        try:
            return empty((n, hidden), dtype, name="tune_mlp.inbox")
        except HeapExhausted:
            continue
    return None


def _build(x: torch.Tensor, weights: list[tuple[torch.Tensor, ...]], blocks: MlpBlocks,
           programs: int | None, scratch: list, inbox: torch.Tensor | None) -> Megakernel:
    """The compiled megakernel of the chained MLPs with these tiles on ``inbox`` (the
    candidates' shared one; made when ``None``); an inbox it made and then itself go to
    ``scratch`` as they are allocated (to be freed, even if compiling fails)."""
    graph = TaskGraph(f"tune_mlp_{blocks.label()}")
    stack = add_tp_mlp_stack(graph, x, weights, blocks=blocks, inbox=inbox)
    if inbox is None:
        scratch.append(stack.inbox)
    mk = graph.compile(programs=programs)
    scratch.append(mk)
    return mk
