"""s30a: where the megakernel's time goes, one H200, bf16, world size 1.

Kernel times from the profiler (GPU only, no host launch cost) and CUDA-event times of 8
calls back to back, for one decode GEMM ``[16, K] @ [K, N]``:
  torch      torch.matmul (cuBLAS)
  grid       matmul_tile as a plain grid (one program per tile)
  static     a persistent loop, tile = pid, pid + P, ... (no queue, no scoreboard)
  ticket     a persistent loop over an atomic ticket counter (the megakernel's queue alone)
  prefetch   the same, taking the next ticket before running the current tile
  mk         the generated one-task megakernel (queue, scoreboard tables, no waits at W=1)
and per-item costs: a graph of tiles that do almost nothing, without and with a wait each."""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl

import ditron
from ditron import task as dt
from ditron.kernels import tiles
from ditron.tune.tuner import time_calls


@triton.jit
def grid_mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tiles.matmul_tile(tl.program_id(0), a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                      BLOCK_M, BLOCK_N, BLOCK_K, "tf32", False)


@triton.jit
def static_mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, n_tiles, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0)
    while t < n_tiles:
        tiles.matmul_tile(t, a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                          BLOCK_M, BLOCK_N, BLOCK_K, "tf32", False)
        t += tl.num_programs(0)


@triton.jit(do_not_specialize=["base"])
def ticket_mm(queue, base, a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, n_tiles,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              PREFETCH: tl.constexpr):
    t = tl.atomic_add(queue, 1) - base
    while t < n_tiles:
        if PREFETCH:
            nxt = tl.atomic_add(queue, 1) - base
        tiles.matmul_tile(t, a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                          BLOCK_M, BLOCK_N, BLOCK_K, "tf32", False)
        if PREFETCH:
            t = nxt
        else:
            t = tl.atomic_add(queue, 1) - base


@triton.jit
def touch_tile(tile, x, n):
    tl.store(x + tile % n, tile)


def gpu_us(fn, n: int = 20) -> float:
    """Median per-call sum of the kernels' durations (profiler)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    ks = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.time_range.elapsed_us() for e in ks)
    return total / n


def busy_us(fn, dev) -> float:
    return statistics.median(time_calls(fn, 3, 15, dev, 8))


def gemm_rows(dev, sms):
    rows = []
    for M, K, N in ((16, 4096, 11008), (16, 11008, 4096)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16) / K ** 0.5
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        ref = (a.float() @ b.float())
        fn = lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)  # noqa: E731
        rows.append(f"M={M} K={K} N={N}: torch gpu {gpu_us(fn):6.1f} busy {busy_us(fn, dev):6.1f}")
        print(rows[-1], flush=True)
        args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
        for bn, bk, stages, warps in ((64, 256, 3, 8), (64, 128, 4, 4), (32, 256, 4, 4),
                                      (16, 256, 4, 4)):
            n_tiles = tiles.num_tiles(M, N, 16, bn)
            kw = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_stages=stages, num_warps=warps)
            cands = {"grid": lambda g=(n_tiles,), x=args, kw=kw: grid_mm[g](*x, **kw)}
            for P in (sms, 2 * sms, 4 * sms):
                cands[f"static{P}"] = (lambda P=P, x=args, n=n_tiles, kw=kw:
                                      static_mm[(P,)](*x, n, **kw))
            for P in (sms, 4 * sms):
                for pre in (False, True):
                    queue = torch.zeros(1, dtype=torch.int64, device=dev)
                    state = {"base": 0}

                    def call(P=P, pre=pre, queue=queue, state=state, x=args, n=n_tiles, kw=kw):
                        ticket_mm[(P,)](queue, state["base"], *x, n, PREFETCH=pre, **kw)
                        state["base"] += n + P
                    cands[f"{'prefetch' if pre else 'ticket'}{P}"] = call
            for P in (n_tiles, sms, 4 * sms):
                g = dt.TaskGraph(f"mm{bn}x{bk}x{P}")
                g.add("mm", tiles.matmul_tile, *args, 16, bn, bk, "tf32", False, tiles=n_tiles)
                cands[f"mk{P}"] = g.compile(programs=P, num_warps=warps, num_stages=stages)
            line = f"  bn {bn:3d} bk {bk:3d} st {stages} w {warps} ({n_tiles} tiles):"
            for name, f in cands.items():
                c.fill_(float("nan"))
                f()
                torch.cuda.synchronize()
                err = float((c.float() - ref).abs().max() / ref.abs().max())
                bad = "" if err < 2e-2 else f" WRONG {err:.3g}"
                line += f"\n    {name:12s} gpu {gpu_us(f):6.1f} busy {busy_us(f, dev):6.1f}{bad}"
            rows.append(line)
            print(line, flush=True)
    return rows


def item_rows(dev, sms):
    """Per-item cost: n items of a tile that stores one int; 'chain': a second task whose
    tile i waits for the first task's tile i."""
    rows = []
    n = 64 * sms
    x = torch.zeros(n, device=dev, dtype=torch.int32)
    y = torch.zeros(n, device=dev, dtype=torch.int32)
    one = lambda t, buf: [dt.region(buf, (t, t + 1))]  # noqa: E731
    for P in (sms, 4 * sms):
        g = dt.TaskGraph(f"touch{P}")
        g.add("a", touch_tile, x, n, tiles=n, writes=lambda t, r: one(t, x))
        mk = g.compile(programs=P)
        g2 = dt.TaskGraph(f"chain{P}")
        g2.add("a", touch_tile, x, n, tiles=n // 2, writes=lambda t, r: one(t, x))
        g2.add("b", touch_tile, y, n, tiles=n // 2, reads=lambda t, r: one(t, x),
               writes=lambda t, r: one(t, y))
        mk2 = g2.compile(programs=P)
        print(mk2, flush=True)
        for name, f in (("independent", mk), ("chained", mk2)):
            t = gpu_us(f)
            rows.append(f"items {n} P {P} {name}: gpu {t:7.1f} us, "
                        f"{1e3 * t / (n / P):6.0f} ns per item per program")
            print(rows[-1], flush=True)
    return rows


def main():
    dev = ditron.world().device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    return item_rows(dev, sms) + gemm_rows(dev, sms)


if __name__ == "__main__":
    for line in ditron.launch(main, 1, backend="cuda")[0]:
        print(line)
    sys.exit(0)
