"""s29b: why the decode MLP megakernel is slow: one GEMM task as a plain grid launch and as a
megakernel, per tile config and num_stages, against torch.matmul (one H200, bf16)."""

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


def main():
    dev = ditron.world().device
    rows = []
    for M, K, N in ((16, 4096, 11008), (16, 11008, 4096), (1, 4096, 11008)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(K, N, device=dev, dtype=torch.bfloat16) / K ** 0.5
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        ref = a @ b
        t = statistics.median(time_calls(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c),
                                         5, 30, dev, 1))
        gb = K * N * 2 / 1e9
        rows.append(f"M={M} K={K} N={N}: torch.matmul {t:8.1f} us ({gb / t * 1e3:.0f} GB/s)")
        for bn, bk in ((64, 64), (64, 128), (64, 256), (32, 256), (128, 128), (32, 512)):
            n_tiles = tiles.num_tiles(M, N, 16, bn)
            for stages in (1, 3, 4):
                args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
                try:
                    c.zero_()
                    _grid_matmul[(n_tiles,)](*args, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk,
                                             num_stages=stages, num_warps=4)
                    ok = torch.allclose(c.float(), ref.float(), atol=5e-2, rtol=5e-2)
                    tg = statistics.median(time_calls(
                        lambda g=(n_tiles,), x=args, kw=dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk,
                                                            num_stages=stages, num_warps=4):
                        _grid_matmul[g](*x, **kw), 3, 20, dev, 1))
                    g = dt.TaskGraph(f"mm{bn}x{bk}x{stages}")
                    g.add("mm", tiles.matmul_tile, *args, 16, bn, bk, "tf32", False,
                          tiles=n_tiles)
                    mk = g.compile(num_stages=stages)
                    c.zero_()
                    mk()
                    ok2 = torch.allclose(c.float(), ref.float(), atol=5e-2, rtol=5e-2)
                    tm = statistics.median(time_calls(mk, 3, 20, dev, 1))
                    rows.append(f"  bn {bn:3d} bk {bk:3d} stages {stages}: tiles {n_tiles:4d}"
                                f"  grid {tg:8.1f} us ({gb / tg * 1e3:5.0f} GB/s, ok {ok})"
                                f"  megakernel {tm:8.1f} us ({gb / tm * 1e3:5.0f} GB/s, ok {ok2})")
                except Exception as exc:  # noqa: BLE001 - report and go on
                    rows.append(f"  bn {bn} bk {bk} stages {stages}: failed {exc!r:.200}")
                print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    for line in ditron.launch(main, 1, backend="cuda")[0]:
        print(line)
    sys.exit(0)
