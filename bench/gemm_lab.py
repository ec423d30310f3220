"""GEMM lab: the local persistent GEMM's variants against cuBLAS on one GPU.

Times each variant four ways, so launch cost and kernel time can be told apart:
``alone`` (CUDA events around one call, as a user's single call sees it), ``stream`` (50
calls back to back between two events: host cost hidden while the GPU is busy), ``graph``
(10 calls captured in a CUDA graph, replayed: no launch cost at all; the variants' graphs
take turns over 7 rounds, median) and ``host`` (CPU
microseconds to issue one call). Medians; fixed warm-up; random bf16 inputs, B given as
``w.t()`` with ``w`` ``[N, K]`` contiguous (a linear layer's weight), the output poisoned
before the checked call and compared with an fp32 product.

``lab`` is a minimal persistent TMA GEMM (grouped order computed inline, no hooks, TMA
store) kept here as the yardstick for what stock Triton reaches on this GPU; ``lab swap``
the same computing ``C^T = W A^T`` (tiles over N x M, stored transposed). The K-split tails
of ``gemm_tails.py`` (``lab sk*``: stream-K; ``lab split*``: split-K; ``lab dp-only``: their
kernel with every tile whole; ``nofix``: timing probes with wrong results) run only when
``--only`` names them.

    python bench/gemm_lab.py [--shapes 8192x1376x4096,...] [--configs 128x256x64/w8/s4,...]
                             [--only SUBSTRING,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch
import triton
import triton.language as tl
from gemm_tails import streamk_call
from triton.tools.tensor_descriptor import TensorDescriptor

from ditron.kernels.gemm import (
    GemmConfig,
    GemmHooks,
    cached_linear_order,
    launch_gemm,
    slot_waits,
)

SHAPES = "8192x1376x4096,8192x3584x8192,8192x6656x16384,8192x4096x1376,8192x8192x3584"


@triton.jit
def lab_gemm(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, FLATTEN: tl.constexpr,
             SWAP: tl.constexpr = False):
    pid = tl.program_id(0)
    m_blocks = tl.cdiv(M, BLOCK_M)
    n_blocks = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_group = GROUP_M * n_blocks
    for t in tl.range(pid, m_blocks * n_blocks, tl.num_programs(0), flatten=FLATTEN):
        first_m = (t // per_group) * GROUP_M
        rows_in_group = tl.minimum(m_blocks - first_m, GROUP_M)
        mb = first_m + (t % per_group) % rows_in_group
        nb = (t % per_group) // rows_in_group
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            a = a_desc.load([mb * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([nb * BLOCK_N, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        if SWAP:  # this tile is C^T's: its rows are C's columns
            c_desc.store([nb * BLOCK_N, mb * BLOCK_M], tl.trans(acc).to(c_desc.dtype))
        else:
            c_desc.store([mb * BLOCK_M, nb * BLOCK_N], acc.to(c_desc.dtype))


def lab_call(a, w, c, cfg: GemmConfig, flatten: bool, swap: bool = False):
    """``c = a @ w.t()``; ``swap``: computed as ``c.t() = w @ a.t()``, tiles over ``N x M``
    (1376 columns pad 2% into 128-row tiles instead of 12% into 256-column ones)."""
    M, K = a.shape
    N = w.shape[0]
    if swap:
        a, w, M, N = w, a, N, M
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n)
    ad = TensorDescriptor(a, [M, K], [K, 1], [cfg.block_m, cfg.block_k])
    bd = TensorDescriptor(w, [N, K], [K, 1], [cfg.block_n, cfg.block_k])
    cd = (TensorDescriptor(c, [N, M], [M, 1], [cfg.block_n, cfg.block_m]) if swap else
          TensorDescriptor(c, [M, N], [N, 1], [cfg.block_m, cfg.block_n]))
    lab_gemm[(min(sms, tiles),)](ad, bd, cd, M, N, K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                 BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m, FLATTEN=flatten,
                                 SWAP=swap, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages)


def timings(fn, warmup: int = 5) -> dict:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    alone = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        alone.append(s.elapsed_time(e) * 1e3)
    stream = []
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(50):
            fn()
        e.record()
        e.synchronize()
        stream.append(s.elapsed_time(e) * 1e3 / 50)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    host = (time.perf_counter() - t0) * 1e6 / 20
    return dict(alone=statistics.median(alone), stream=statistics.median(stream), host=host)


def capture(fn, calls: int = 10) -> torch.cuda.CUDAGraph:
    """``calls`` back-to-back calls of ``fn`` captured in a CUDA graph."""
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm the side stream before capture
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def graph_rounds(graphs: dict, rounds: int = 7, calls: int = 10) -> dict[str, float]:
    """Per-call microseconds of each captured graph: the variants take turns, at least
    ``rounds`` times, each round starting one variant later (``tune.tuner.rotations``), so that
    clock and temperature drift hit them alike and no variant always runs right after the
    same one (the GPU's clocks follow the previous kernel's power: docs/perf.md, session
    14); median over rounds."""
    from ditron.tune.tuner import rotations

    times: dict[str, list[float]] = {name: [] for name in graphs}
    for names in rotations(list(graphs), rounds):
        for name in names:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graphs[name].replay()
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e3 / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def variants(M: int, N: int) -> dict[str, GemmConfig]:
    base = GemmConfig()  # 128x256x64, 8 warps, 3 stages, group 8
    out = {
        "base": base,
        "flat": dataclasses.replace(base, flatten=True),
        "tstore": dataclasses.replace(base, tma_store=True),
        "flat+tstore": dataclasses.replace(base, flatten=True, tma_store=True),
        "128x128s4w4 flat+ts": GemmConfig(128, 128, 64, 8, 4, 4, flatten=True, tma_store=True),
        "256x128s3w8 flat+ts": GemmConfig(256, 128, 64, 8, 8, 3, flatten=True, tma_store=True),
        "128x256s4w8 flat": GemmConfig(128, 256, 64, 8, 8, 4, flatten=True),
    }
    return out


def parse_config(text: str) -> GemmConfig:
    """``BMxBNxBK/wW/sS[/gG][/t0][/pP]`` as a flattened :class:`GemmConfig` (``t0``: plain
    stores of C instead of TMA stores; ``pP``: ``P`` programs instead of one per SM)."""
    dims, *rest = text.split("/")
    bm, bn, bk = (int(v) for v in dims.split("x"))
    opts = {part[0]: int(part[1:]) for part in rest}
    return GemmConfig(bm, bn, bk, opts.get("g", 8), opts.get("w", 8), opts.get("s", 3),
                      programs=opts.get("p", 0), flatten=True,
                      tma_store=bool(opts.get("t", 1)))


def run_shape(M: int, N: int, K: int, extra: tuple[str, ...] = (),
              only: tuple[str, ...] = ()) -> list[dict]:
    import ditron

    shape = f"{M}x{N}x{K}"
    rows = []
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    b = w.t()
    ref = a.float() @ b.float()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

    def check(fn, name):
        c.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2 and not name.endswith("nofix"):  # the probes' results are wrong
            raise AssertionError(f"{shape} {name}: relative error {err}")
        return err

    cases = {"cublas": lambda: torch.matmul(a, b, out=c)}
    configs = variants(M, N) | {f"cfg {text}": parse_config(text) for text in extra}
    for name, cfg in configs.items():
        order = cached_linear_order(M, N, cfg, a.device)
        cases[name] = (lambda cfg=cfg, order=order:
                       launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg))
    base = GemmConfig()
    base_order = cached_linear_order(M, N, base, a.device)
    cases["base ptr"] = lambda: launch_gemm(a, b, c, M, order=base_order, seg_rows=M, cfg=base,
                                            use_tma=False)
    for fl in (False, True):
        cases[f"lab flat={int(fl)}"] = lambda fl=fl: lab_call(a, w, c, GemmConfig(), fl)
        cases[f"lab swap flat={int(fl)}"] = lambda fl=fl: lab_call(a, w, c, GemmConfig(), fl,
                                                                   swap=True)
    tails = {}
    for swap in (False, True):
        sw = " swap" if swap else ""
        for waves in (0, 1):
            work: dict = {}
            tails[f"lab sk{'+1' if waves else ''}{sw}"] = (
                lambda swap=swap, waves=waves, work=work:
                streamk_call(a, w, c, GemmConfig(), swap, extra_waves=waves, work=work))
        for split in (0, 2, 3):
            work = {}
            tails[f"lab split{split or ''}{sw}"] = (
                lambda swap=swap, split=split, work=work:
                streamk_call(a, w, c, GemmConfig(), swap, work=work, split=split))
    for name, kw in (("lab sk swap nofix", dict(swap=True, fixup=0)),
                     ("lab split swap nofix", dict(swap=True, split=0, fixup=0)),
                     ("lab split swap nowait nofix", dict(swap=True, split=0, fixup=3)),
                     ("lab split swap slabs", dict(swap=True, split=0, fixup=2)),
                     ("lab split nofix", dict(split=0, fixup=0)),
                     ("lab dp-only", dict(extra_waves=-1, fixup=0))):
        work = {}
        tails[name] = lambda kw=kw, work=work: streamk_call(a, w, c, GemmConfig(), work=work,
                                                            **kw)
    # consumer GEMM: one chunk wait per tile, every chunk already arrived
    best = GemmConfig(flatten=True, tma_store=True)
    mb = triton.cdiv(M, best.block_m)
    sig = ditron.zeros(8, torch.int64)
    sig.fill_(1)
    lo = torch.arange(mb, dtype=torch.int32, device="cuda") * best.block_m * 8 // M
    order = cached_linear_order(M, N, best, a.device)
    hooks = GemmHooks(waits=slot_waits(order, lo, lo, triton.cdiv(N, best.block_n)),
                      wait_sig=sig, wait_target=1)
    cases["flat+tstore wait"] = lambda: launch_gemm(a, b, c, M, order=order, seg_rows=M,
                                                    cfg=best, hooks=hooks)
    if only:
        cases = {name: fn for name, fn in (cases | tails).items()
                 if name == "cublas" or any(o in name for o in only)}
    graphs = {}
    for name, fn in cases.items():
        try:
            err = check(fn, name)
            t = timings(fn)
            graphs[name] = capture(fn)
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            print(f"{shape} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}",
                  flush=True)
            continue
        rows.append(dict(M=M, N=N, K=K, variant=name, err=err, **t))
    per_call = graph_rounds(graphs)
    for row in rows:
        row["graph"] = per_call[row["variant"]]
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    p.add_argument("--configs", default="",
                   help="more tile configs, BMxBNxBK/wW/sS[/gG][/t0][/pP] comma-separated "
                        "(flattened; t0: plain stores)")
    p.add_argument("--only", default="",
                   help="time only the variants whose names contain one of these "
                        "comma-separated substrings (and cuBLAS)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import ditron

    ditron.init("cuda")
    torch.manual_seed(0)
    rows = []
    for shape in args.shapes.split(","):
        extra = tuple(c for c in args.configs.split(",") if c)
        only = tuple(o for o in args.only.split(",") if o)
        rows += run_shape(*(int(x) for x in shape.split("x")), extra, only)
    with open(os.path.join(args.out, "gemm_lab.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\n{'shape':<18}{'variant':<22}{'alone':>8}{'stream':>8}{'graph':>8}{'host':>7}"
          f"{'x cuBLAS(graph)':>16}")
    for r in rows:
        shape = f"{r['M']}x{r['N']}x{r['K']}"
        cub = next(x for x in rows if x["variant"] == "cublas" and x["N"] == r["N"]
                   and x["K"] == r["K"] and x["M"] == r["M"])
        print(f"{shape:<18}{r['variant']:<22}{r['alone']:8.1f}{r['stream']:8.1f}"
              f"{r['graph']:8.1f}{r['host']:7.1f}{cub['graph'] / r['graph']:16.3f}")


if __name__ == "__main__":
    main()
