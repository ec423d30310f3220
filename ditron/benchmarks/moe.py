"""Time expert parallelism: the grouped GEMM alone, and a whole MoE layer.

    python -m ditron bench moe --world-size 1 --out moe.json

``gemm`` rows (REFERENCES.md's MoE shapes ``(N, K, experts, topk)``, ``--tokens`` tokens
routed uniformly at random, bf16): ``ditron.ops.grouped_gemm`` (``ditron``: its ``"auto"``
choice; ``ditron_triton``: Ditron's kernel) against a loop of
``torch.matmul`` over the experts (cuBLAS; the counts read on the host first, as a
framework's loop must) and, where torch has it, ``torch._grouped_mm``; plus a dense
``torch.matmul`` of the same rows and FLOPs (``dense``), the ceiling a balanced routing
could reach.

``layer`` rows: ``relu(x @ w1[e]) @ w2[e]`` (``--gated``: SwiGLU, ``(silu(x @ g[e]) *
(x @ u[e])) @ w2[e]`` with ``w1 = [g | u]``) over the top-k experts, combined with the
routing weights, per rank ``--layer-tokens`` tokens of hidden ``--hidden``, ``--experts``
experts (in equal blocks over the ranks) of width ``--ffn``, top-``--topk``. ``ditron``:
``moe_dispatch`` + two ``grouped_gemm`` + ``moe_combine`` (no host synchronisation);
``torch``: the same with ``dist.all_to_all_single`` (split sizes read on the host) and the
matmul loop, as a Megatron-style all-to-all dispatcher without a grouped GEMM does;
``ditron_graph`` (on a GPU): the ditron layer captured as one CUDA graph and replayed;
``ditron_gemm_triton`` / ``ditron_gemm_torch`` (on a GPU): the ditron layer with each
grouped-GEMM method forced.

``wgrad`` rows (the same shapes and routing as ``gemm``): the weight gradient
``dw[e] = x_e.T @ dy_e`` by ``ditron.kernels.grouped_gemm.grouped_gemm_wgrad``
(``ditron``, the one ``ditron.nn``'s backward uses) against the ``torch.matmul`` loop over
the experts (``torch_loop``).

``a2a`` rows: the dispatch's data movement, ``--layer-tokens`` x top-k rows of ``--hidden``
through ``ditron.ops.all_to_all_device`` (even splits; a remainder goes one row each to the
next ranks in a ring, so every rank receives as many rows as it sends), with the gathers
before sending and after receiving (random row indices and permutation) fused into its
kernels (``fused``), done by ``index_select`` around it (``unfused``), and without gathers
(``plain``).

Per-call times are the slower rank's median (CUDA events, fixed counts on every rank,
variants in rotating rounds, warm-up excluded); errors (``max_rel_err``, ``fp8_rel_err``) are
the worst rank's (NaN where any rank's is), and ``same_result`` / ``same_groups`` hold only
where they hold on every rank. ``--smoke``: CPU backend, tiny shapes, to
check the script; its times mean nothing.
"""

from __future__ import annotations

import argparse
import functools
import math

import torch
import torch.distributed as dist

import ditron
from ditron.benchmarks import provenance, worst, write_json
from ditron.kernels.grouped_gemm import (
    GroupedGemmConfig,
    grouped_gemm,
    grouped_gemm_wgrad,
)
from ditron.runtime.arguments import (
    add_timing_options,
    choice_list,
    int_list,
    output_file,
    positive_int,
    smoke_defaults,
)
from ditron.tune.tuner import agreed_median, all_ok, time_in_rounds

#: (N, K, experts, topk) of REFERENCES.md: Qwen1.5-MoE, Mixtral-8x7B, Mixtral-8x22B,
#: DeepSeek-MoE
#: what ``--parts`` can time
PARTS = ("gemm", "wgrad", "a2a", "dispatch", "layer")
SHAPES = [(1408, 2048, 60, 4), (4096, 14336, 8, 2), (6144, 16384, 8, 2), (2048, 1408, 64, 6)]


def _routing(tokens: int, experts: int, topk: int, device, gen) -> torch.Tensor:
    """Top-k distinct experts per token, uniformly at random: ``[tokens, topk]``."""
    scores = torch.rand(tokens, experts, generator=gen)
    return scores.topk(topk, dim=1).indices.to(device)


#: tile configs ``--sweep`` times beside the default: (BM, BN, BK, warps, stages, group_m,
#: TMA loads)
SWEEP = [(128, 256, 64, 8, 3, 8, False), (128, 256, 64, 8, 3, 8, True),
         (128, 128, 64, 4, 4, 8, True), (256, 128, 64, 8, 3, 8, True),
         (128, 256, 64, 8, 4, 1, True), (64, 256, 64, 4, 3, 8, True),
         (64, 128, 64, 4, 4, 8, True), (64, 256, 64, 4, 3, 8, False),
         (64, 128, 64, 4, 4, 8, False), (128, 128, 64, 8, 4, 8, False),
         (64, 128, 64, 4, 5, 8, False), (64, 64, 128, 4, 4, 8, False),
         (128, 128, 128, 8, 3, 8, True), (64, 256, 64, 8, 4, 8, False),
         (128, 256, 128, 8, 2, 8, True), (256, 128, 64, 8, 4, 8, True)]

#: weight-gradient configs ``--sweep`` times: (K tile, N tile, rows per step, warps,
#: stages, K tiles per band of the tile order, TMA loads) as ``GroupedGemmConfig(block_m,
#: block_n, block_k, ...)``; a band of 1024 K tiles is the whole K (session 46's first order)
WGRAD_SWEEP = [(128, 256, 64, 8, 3, 8, False), (128, 256, 64, 8, 4, 1024, True),
               (128, 256, 64, 8, 4, 4, True), (128, 256, 64, 8, 4, 16, True),
               (128, 256, 64, 8, 4, 32, True), (128, 256, 32, 8, 4, 8, True),
               (64, 256, 64, 4, 4, 8, True), (128, 128, 64, 8, 4, 8, True)]


def _gemm_row(n: int, k: int, experts: int, topk: int, tokens: int, dev, gen, rounds: int,
              iters: int, warmup: int, sweep: bool) -> dict:
    dtype = torch.bfloat16
    ids = _routing(tokens, experts, topk, dev, gen).reshape(-1)
    counts = torch.bincount(ids, minlength=experts)
    offsets = torch.zeros(experts + 1, dtype=torch.int64, device=dev)
    torch.cumsum(counts, 0, out=offsets[1:])
    m = ids.numel()
    x = torch.randn(m, k, device=dev, dtype=dtype)
    w = torch.randn(experts, n, k, device=dev, dtype=dtype).transpose(1, 2)  # [E, K, N]
    out = torch.empty(m, n, device=dev, dtype=dtype)

    def ditron_call():
        ditron.ops.grouped_gemm(x, w, offsets)

    def triton_call():
        ditron.ops.grouped_gemm(x, w, offsets, out=out, method="triton")

    def loop_call():
        bounds = offsets.tolist()
        for e in range(experts):
            torch.matmul(x[bounds[e]:bounds[e + 1]], w[e], out=out[bounds[e]:bounds[e + 1]])

    def dense_call():
        torch.matmul(x, w[0], out=out)

    fns = {"ditron": ditron_call, "ditron_triton": triton_call, "torch_loop": loop_call,
           "dense": dense_call}
    for bm, bn, bk, warps, stages, group, tma in SWEEP if sweep else ():
        cfg = GroupedGemmConfig(bm, bn, bk, warps, stages, group, tma)
        label = f"{bm}x{bn}x{bk}w{warps}s{stages}g{group}{'' if tma else 'ptr'}"
        fns[f"ditron_{label}"] = functools.partial(
            grouped_gemm, x, w, offsets, out=out, config=cfg)
    grouped_mm = getattr(torch, "_grouped_mm", None)
    if grouped_mm is not None and dev.type == "cuda":
        ends = offsets[1:].to(torch.int32)
        try:
            grouped_mm(x, w, offs=ends)
            fns["torch_grouped_mm"] = lambda: grouped_mm(x, w, offs=ends)
        except (RuntimeError, TypeError, NotImplementedError):
            pass
    loop_call()
    ref = out.clone()

    def rel_err(call) -> float:  # of a call that writes ``out`` (poisoned first)
        out.fill_(float("nan"))
        call()
        return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()

    errs = [rel_err(lambda: out.copy_(ditron.ops.grouped_gemm(x, w, offsets))),
            *(rel_err(fn) for name, fn in fns.items() if name.startswith("ditron_"))]
    err = worst(float("nan") if any(math.isnan(e) for e in errs) else max(errs))
    samples = time_in_rounds(fns, rounds, iters, warmup, dev)
    row = {"part": "gemm", "n": n, "k": k, "experts": experts, "topk": topk, "rows": m,
           "max_rel_err": err}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    row["tflops_ditron"] = 2 * m * n * k / row["ditron"] / 1e6
    return row


def _wgrad_row(n: int, k: int, experts: int, topk: int, tokens: int, dev, gen, rounds: int,
               iters: int, warmup: int, sweep: bool) -> dict:
    dtype = torch.bfloat16
    ids = _routing(tokens, experts, topk, dev, gen).reshape(-1)
    offsets = torch.zeros(experts + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(ids, minlength=experts), 0, out=offsets[1:])
    m = ids.numel()
    x = torch.randn(m, k, device=dev, dtype=dtype)
    dy = torch.randn(m, n, device=dev, dtype=dtype)
    dw = torch.empty(experts, k, n, device=dev, dtype=dtype)

    def loop_call():
        bounds = offsets.tolist()
        for e in range(experts):
            torch.matmul(x[bounds[e]:bounds[e + 1]].t(), dy[bounds[e]:bounds[e + 1]],
                         out=dw[e])

    fns = {"ditron": lambda: grouped_gemm_wgrad(x, dy, offsets, out=dw),
           "torch_loop": loop_call}
    for bm, bn, bk, warps, stages, group, tma in WGRAD_SWEEP if sweep else ():
        cfg = GroupedGemmConfig(bm, bn, bk, warps, stages, group, tma)
        label = f"{bm}x{bn}x{bk}w{warps}s{stages}g{group}{'' if tma else 'ptr'}"
        fns[f"ditron_{label}"] = functools.partial(
            grouped_gemm_wgrad, x, dy, offsets, out=dw, config=cfg)
    loop_call()
    ref = dw.clone().float()
    errs = []
    for name in (name for name in fns if name.startswith("ditron")):
        dw.fill_(float("nan"))
        fns[name]()
        errs.append(((dw.float() - ref).abs().max() / ref.abs().max()).item())
    samples = time_in_rounds(fns, rounds, iters, warmup, dev)
    row = {"part": "wgrad", "n": n, "k": k, "experts": experts, "topk": topk, "rows": m,
           "max_rel_err": worst(float("nan") if any(math.isnan(e) for e in errs)
                                else max(errs))}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    return row


def _gemm_rows(shapes: list[tuple[int, int, int, int]], tokens: int, dev, rounds: int,
               iters: int, warmup: int, sweep: bool) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    return [_gemm_row(n, k, experts, topk, tokens, dev, gen, rounds, iters, warmup, sweep)
            for n, k, experts, topk in shapes]


def _act(h: torch.Tensor, gated: bool) -> torch.Tensor:
    """The experts' activation: ``relu``, or gated (SwiGLU: ``h``'s first half the gate)."""
    if not gated:
        return torch.relu(h)
    gate, up = h.chunk(2, dim=1)
    return torch.nn.functional.silu(gate) * up


def _torch_layer(x, ids, weights, w1, w2, experts: int, group, gated: bool) -> torch.Tensor:
    """The layer with torch.distributed and a matmul loop (host-read split sizes)."""
    W = dist.get_world_size(group)
    local = experts // W
    T, k = ids.shape
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts).view(W, local)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    send = counts.sum(1).tolist()
    recv_mat = recv_counts.cpu()
    recv_n = recv_mat.sum(1).tolist()
    received = x.new_empty(sum(recv_n), x.shape[1])
    dist.all_to_all_single(received, x[order // k], recv_n, send, group=group)
    expert = torch.arange(local, device=x.device).repeat(W).repeat_interleave(
        recv_counts.reshape(-1))
    perm = torch.argsort(expert, stable=True)
    grouped = received[perm]
    per_expert = recv_mat.sum(0).tolist()
    y = torch.empty_like(grouped)
    lo = 0
    for e, n in enumerate(per_expert):
        y[lo:lo + n] = _act(grouped[lo:lo + n] @ w1[e], gated) @ w2[e]
        lo += n
    back_in = torch.empty_like(y)
    back_in[perm] = y
    back = x.new_empty(T * k, x.shape[1])
    dist.all_to_all_single(back, back_in, send, recv_n, group=group)
    copies = torch.empty_like(back)
    copies[order] = back
    return (copies.view(T, k, -1).float() * weights[:, :, None]).sum(1).to(x.dtype)


def _layer_rows(tokens: int, hidden: int, ffn: int, experts: int, topk: int, rounds: int,
                iters: int, warmup: int, profile: bool = False,
                gated: bool = False) -> list[dict]:
    from ditron.runtime.world import current

    rt = current()
    W, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    dtype = torch.bfloat16
    local = experts // W
    gen = torch.Generator().manual_seed(1 + me)
    ids = _routing(tokens, experts, topk, dev, gen)
    weights = torch.rand(tokens, topk, generator=gen).to(dev)
    x = torch.randn(tokens, hidden, generator=gen).to(dev, dtype)
    width = 2 * ffn if gated else ffn
    w1 = (torch.randn(local, hidden, width, generator=gen) / hidden ** 0.5).to(dev, dtype)
    w2 = (torch.randn(local, ffn, hidden, generator=gen) / ffn ** 0.5).to(dev, dtype)
    group = rt.groups.device

    def ditron_layer(method: str = "auto"):
        d = ditron.ops.moe_dispatch(x, ids, experts)
        r = d.mean_rows_per_expert
        h = _act(ditron.ops.grouped_gemm(d.x, w1, d.expert_offsets, method=method,
                                         rows_per_group=r), gated)
        y = ditron.ops.grouped_gemm(h, w2, d.expert_offsets, method=method, rows_per_group=r)
        return ditron.ops.moe_combine(y, d, weights)

    def torch_layer():
        return _torch_layer(x, ids, weights, w1, w2, experts, group, gated)

    got, ref = ditron_layer(), torch_layer()
    err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-6))
    fns = {"ditron": ditron_layer, "torch": torch_layer}
    if dev.type == "cuda":  # each grouped-GEMM method alike, whatever "auto" picks
        fns["ditron_gemm_triton"] = functools.partial(ditron_layer, "triton")
        fns["ditron_gemm_torch"] = functools.partial(ditron_layer, "torch")
    if dev.type == "cuda":  # the whole layer as one CUDA graph (it never syncs the host)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ditron_layer()
        fns["ditron_graph"] = graph.replay
    samples = time_in_rounds(fns, rounds, iters, warmup, dev)
    if profile:
        _profile_layer(ditron_layer, tokens, dev, me == 0)
    row = {"part": "layer", "tokens": tokens, "hidden": hidden, "ffn": ffn,
           "experts": experts, "topk": topk, "world_size": W, "gated": gated,
           "max_rel_err": worst(float(err))}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    row["speedup"] = row["torch"] / row["ditron"]
    if "ditron_graph" in row:
        row["speedup_graph"] = row["torch"] / row["ditron_graph"]
    return [row]


def _profile_layer(layer, tokens: int, dev, show: bool) -> None:
    """Profile one call of ``layer`` on every rank (its dispatch and combine are collectives:
    a call on one rank alone would wait forever for its peers); ``show``: print the time by
    kernel (GPU) or by operator (CPU backend)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = dev.type == "cuda"
    with torch_profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]
                       ) as prof:
        layer()
        if cuda:
            torch.cuda.synchronize()
    if show:
        what = "GPU time by kernel" if cuda else "CPU time by operator"
        print(f"ditron layer, {tokens} tokens: {what}", flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total" if cuda else
                                        "cpu_time_total", row_limit=15), flush=True)


def even_splits(rows: int, W: int, rank: int) -> torch.Tensor:
    """``rank``'s send splits of ``rows`` rows over ``W`` ranks when every rank sends as many:
    ``rows // W`` to each, one more to each of the ``rows % W`` ranks after ``rank`` (in a
    ring), so that every rank also receives exactly ``rows`` rows (int64 ``[W]``)."""
    extra = (torch.arange(W) - rank) % W < rows % W
    return rows // W + extra.to(torch.int64)


def _a2a_rows(tokens: int, hidden: int, topk: int, rounds: int, iters: int,
              warmup: int) -> list[dict]:
    from ditron.runtime.world import current

    rt = current()
    W, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    gen = torch.Generator().manual_seed(7 + me)
    rows = tokens * topk
    x = torch.randn(tokens, hidden, generator=gen).to(dev, torch.bfloat16)
    index = torch.randint(0, tokens, (rows,), generator=gen).to(dev)
    cap = rows  # every rank sends rows and receives as many (even_splits)
    perm = torch.randperm(cap, generator=gen).to(dev)
    splits = even_splits(rows, W, me).to(dev)
    a2a = ditron.ops.all_to_all_device

    def fused():
        return a2a(x, splits, cap, send_index=index, recv_index=perm)[0]

    def unfused():
        return a2a(x.index_select(0, index), splits, cap)[0].index_select(0, perm)

    gathered = x.index_select(0, index)

    def plain():
        return a2a(gathered, splits, cap)[0]

    ok = torch.equal(fused(), unfused())
    samples = time_in_rounds({"fused": fused, "unfused": unfused, "plain": plain}, rounds,
                             iters, warmup, dev)
    row = {"part": "a2a", "tokens": tokens, "hidden": hidden, "topk": topk, "world_size": W,
           "bytes": rows * hidden * 2, "same_result": all_ok(ok)}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    row["speedup"] = row["unfused"] / row["fused"]
    return [row]


def _dispatch_rows(tokens: int, hidden: int, experts: int, topk: int, rounds: int,
                   iters: int, warmup: int) -> list[dict]:
    """``moe_dispatch`` of bf16 token rows against fp8 (e4m3) rows with their fp32 scales
    per 128 channels (``x_scales``): the same routing, the rows' bytes halved. ``fp8_apart``
    moves the scales in an exchange of their own after the rows' (what ``x_scales`` did
    before it rode along the rows' routes)."""
    from ditron.runtime.world import current

    rt = current()
    W, me, dev = rt.world.world_size, rt.world.rank, rt.world.device
    gen = torch.Generator().manual_seed(11 + me)
    ids = _routing(tokens, experts, topk, dev, gen)
    x = torch.randn(tokens, hidden, generator=gen).to(dev, torch.bfloat16)
    scales = x.float().view(tokens, -1, 128).abs().amax(-1).clamp(min=1e-4) / 448
    x8 = (x.float().view(tokens, -1, 128) / scales[..., None]).view(tokens, hidden).to(
        torch.float8_e4m3fn)

    def bf16():
        return ditron.ops.moe_dispatch(x, ids, experts)

    def fp8():
        return ditron.ops.moe_dispatch(x8, ids, experts, x_scales=scales)

    def fp8_apart():
        d = ditron.ops.moe_dispatch(x8, ids, experts)
        return ditron.ops.all_to_all_device(scales, d.send_splits, d.capacity,
                                            send_index=d.token, recv_index=d.perm)

    a, b = bf16(), fp8()
    ok = torch.equal(a.expert_offsets, b.expert_offsets)
    n = int(a.expert_offsets[-1])
    deq = (b.x[:n].float().view(n, -1, 128) * b.x_scales[:n, :, None]).view(n, hidden)
    err = ((deq - a.x[:n].float()).norm() / a.x[:n].float().norm().clamp(min=1e-30)).item()
    samples = time_in_rounds({"bf16": bf16, "fp8": fp8, "fp8_apart": fp8_apart}, rounds,
                             iters, warmup, dev)
    row = {"part": "dispatch", "tokens": tokens, "hidden": hidden, "experts": experts,
           "topk": topk, "world_size": W, "same_groups": all_ok(ok),
           "fp8_rel_err": worst(err)}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    row["speedup"] = row["bf16"] / row["fp8"]
    return [row]


def _measure(args) -> list[dict]:
    dev = ditron.world().device
    rows = []
    if "gemm" in args.parts:
        rows += _gemm_rows(args.shapes, args.tokens, dev, args.rounds, args.iters, args.warmup,
                           args.sweep)
    if "wgrad" in args.parts:
        gen = torch.Generator().manual_seed(0)
        rows += [_wgrad_row(n, k, experts, topk, args.tokens, dev, gen, args.rounds,
                            args.iters, args.warmup, args.sweep)
                 for n, k, experts, topk in args.shapes]
    if "a2a" in args.parts:
        for tokens in args.layer_tokens:
            rows += _a2a_rows(tokens, args.hidden, args.topk, args.rounds, args.iters,
                              args.warmup)
    if "dispatch" in args.parts:
        for tokens in args.layer_tokens:
            rows += _dispatch_rows(tokens, args.hidden, args.experts, args.topk, args.rounds,
                                   args.iters, args.warmup)
    if "layer" in args.parts:
        for tokens in args.layer_tokens:
            rows += _layer_rows(tokens, args.hidden, args.ffn, args.experts, args.topk,
                                args.rounds, args.iters, args.warmup, args.profile,
                                args.gated)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    for row in rows:
        row["device"] = name
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ditron bench moe", description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=positive_int, default=1,
                   help="ranks to launch (default %(default)s)")
    p.add_argument("--parts", default="gemm,a2a,layer", type=choice_list(PARTS),
                   help=f"a comma list of {', '.join(PARTS)} (default %(default)s)")
    p.add_argument("--tokens", type=positive_int, default=8192,
                   help="tokens of the gemm rows (default %(default)s)")
    p.add_argument("--layer-tokens", default="128,8192", type=int_list(),
                   help="tokens per rank of the layer rows, a comma list (default %(default)s)")
    p.add_argument("--hidden", type=positive_int, default=7168,
                   help="model dimension (default %(default)s)")
    p.add_argument("--ffn", type=positive_int, default=2048,
                   help="expert FFN dimension (default %(default)s)")
    p.add_argument("--experts", type=positive_int, default=64,
                   help="experts in all, split over the ranks (default %(default)s)")
    p.add_argument("--topk", type=positive_int, default=8,
                   help="experts per token (default %(default)s)")
    add_timing_options(p, 3, 20, rounds=4)
    p.add_argument("--sweep", action="store_true", help="time other tile configs too")
    p.add_argument("--gated", action="store_true",
                   help="layer rows: SwiGLU experts (w1 twice as wide; silu(gate) * up)")
    p.add_argument("--profile", action="store_true",
                   help="print the ditron layer's GPU time by kernel (torch.profiler; on the "
                        "CPU backend its time by operator)")
    p.add_argument("--smoke", action="store_true",
                   help="CPU backend, tiny shapes, timed with --warmup 1 --iters 2 --rounds 1 "
                        "unless given")
    p.add_argument("--out", type=output_file, help="write the rows as JSON here")
    args = p.parse_args(argv)
    backend = "cpu" if args.smoke else "cuda"
    args.shapes = SHAPES
    if args.smoke:
        args.shapes = [(24, 40, 4, 2)]
        smoke_defaults(p, argv, args, {"tokens": 16, "layer_tokens": [6], "hidden": 256,
                                       "ffn": 16, "experts": 2 * args.world_size, "topk": 2},
                       {"warmup": 1, "iters": 2, "rounds": 1})
    # the layer's options, checked before any rank starts (they failed in every rank, late)
    if args.experts % args.world_size:
        p.error(f"--experts {args.experts} must divide by the world size {args.world_size}")
    if {"dispatch", "layer"} & set(args.parts) and args.topk > args.experts:
        p.error(f"--topk {args.topk}: more experts per token than --experts {args.experts}")
    if "dispatch" in args.parts and args.hidden % 128:
        p.error(f"--hidden {args.hidden}: the dispatch rows' fp8 scales are per 128 channels, "
                f"give a multiple of 128")
    if backend == "cuda" and not torch.cuda.is_available():  # before any rank starts
        p.error("no CUDA device is visible: it times GPUs (--smoke runs tiny shapes on the "
                "CPU backend)")
    rows = ditron.launch(_measure, args.world_size, args, backend=backend)[0]
    for row in rows:
        if row["part"] == "gemm":
            extra = "".join(f"  {name} {row[name]:9.1f}" for name in row
                            if name == "torch_grouped_mm" or name.startswith("ditron_"))
            print(f"gemm  N {row['n']:5d} K {row['k']:5d} E {row['experts']:3d} top{row['topk']}"
                  f"  ditron {row['ditron']:9.1f}  torch_loop {row['torch_loop']:9.1f}{extra}"
                  f"  dense {row['dense']:9.1f} us  ({row['tflops_ditron']:.0f} TFLOP/s, "
                  f"err {row['max_rel_err']:.1e})")
        elif row["part"] == "wgrad":
            print(f"wgrad N {row['n']:5d} K {row['k']:5d} E {row['experts']:3d} top{row['topk']}"
                  f"  ditron {row['ditron']:9.1f}  torch_loop {row['torch_loop']:9.1f}"
                  + "".join(f"  {name} {row[name]:9.1f}" for name in row
                            if name.startswith("ditron_"))
                  + f" us  (err {row['max_rel_err']:.1e})")
        elif row["part"] == "a2a":
            print(f"a2a   T {row['tokens']:5d} H {row['hidden']} top{row['topk']} "
                  f"W {row['world_size']}  fused {row['fused']:9.1f}  unfused "
                  f"{row['unfused']:9.1f}  plain {row['plain']:9.1f} us  fused speed-up "
                  f"{row['speedup']:.3f}x  (same result: {row['same_result']})")
        elif row["part"] == "dispatch":
            print(f"dispatch T {row['tokens']:5d} H {row['hidden']} E {row['experts']} "
                  f"top{row['topk']} W {row['world_size']}  bf16 {row['bf16']:9.1f}  fp8 + "
                  f"scales {row['fp8']:9.1f} us  ({row['speedup']:.3f}x; same groups: "
                  f"{row['same_groups']}, fp8 error {row['fp8_rel_err']:.1e}); scales in "
                  f"an exchange of their own {row['fp8_apart']:9.1f} us")
        else:
            print(f"layer T {row['tokens']:5d} H {row['hidden']} F {row['ffn']}"
                  f"{' SwiGLU' if row['gated'] else ''} E {row['experts']} top{row['topk']} "
                  f"W {row['world_size']}  ditron "
                  f"{row['ditron']:9.1f}  torch {row['torch']:9.1f} us  speed-up "
                  f"{row['speedup']:.3f}x" + (f"  graph {row['ditron_graph']:9.1f} us "
                                              f"({row['speedup_graph']:.3f}x)"
                                              if "ditron_graph" in row else "")
                  + "".join(f"  {name} {row[name]:9.1f}" for name in
                            ("ditron_gemm_triton", "ditron_gemm_torch") if name in row)
                  + f"  (err {row['max_rel_err']:.1e})")
    if args.out:
        meta = provenance("moe", argv, backend, **vars(args))
        write_json(args.out, {"meta": meta, "rows": rows})
    return 0
