"""s29e: one GEMM task inside a megakernel against the same tile as a plain grid launch, per
programs and num_warps (one H200, bf16): where the megakernel's per-tile cost comes from."""

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
def _grid_matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tiles.matmul_tile(tl.program_id(0), a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                      BLOCK_M, BLOCK_N, BLOCK_K, "tf32", False)


def _median(fn, dev) -> float:
    return statistics.median(time_calls(fn, 3, 20, dev, 1))


def main():
    dev = ditron.world().device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows = []
    for M, K, N in ((16, 4096, 11008), (16, 11008, 4096)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16) / K ** 0.5
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        t = _median(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c), dev)
        rows.append(f"M={M} K={K} N={N}: torch.matmul {t:7.1f} us")
        print(rows[-1], flush=True)
        args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
        for bn, bk, stages in ((64, 128, 4), (32, 256, 4), (64, 256, 3)):
            n_tiles = tiles.num_tiles(M, N, 16, bn)
            for warps in (4, 8):
                kw = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_stages=stages,
                          num_warps=warps)
                tg = _median(lambda g=(n_tiles,), x=args, kw=kw: _grid_matmul[g](*x, **kw), dev)
                line = (f"  bn {bn:3d} bk {bk:3d} st {stages} warps {warps}: grid {tg:7.1f}"
                        f" | megakernel by programs")
                for per_sm in (1, 2, 4):
                    g = dt.TaskGraph(f"mm{bn}x{bk}x{stages}x{warps}x{per_sm}")
                    g.add("mm", tiles.matmul_tile, *args, 16, bn, bk, "tf32", False,
                          tiles=n_tiles)
                    mk = g.compile(programs=per_sm * sms, num_warps=warps, num_stages=stages)
                    line += f"  {per_sm * sms}: {_median(mk, dev):7.1f}"
                rows.append(line)
                print(line, flush=True)
    return rows


if __name__ == "__main__":
    for line in ditron.launch(main, 1, backend="cuda")[0]:
        print(line)
    sys.exit(0)
