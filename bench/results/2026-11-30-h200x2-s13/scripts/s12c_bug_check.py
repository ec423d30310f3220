"""The removed GEMM-RS engine copy_engine_persistent (commit 4638c43) on the CPU backend:
seconds per call and the largest error against a torch reference, for the kernel as
committed and with the WAIT block's ``hi`` renamed (so the phase loop's ``lo = hi`` takes
the phase's end again). Run from a tree holding that commit's ``ditron`` package:

    git archive 4638c43 ditron | tar -x -C /tmp/old12   # (and a copy with the rename)
    cd /tmp/old12 && PYTHONPATH=$PWD python .../s12c_bug_check.py committed
"""
import sys
import time

import torch

import ditron


def case(chunk_rows):
    w = ditron.world()
    torch.manual_seed(w.rank)
    a = torch.randn(128, 32)
    b = torch.randn(48, 32).t()
    full = [torch.empty_like(a) for _ in range(w.world_size)]
    bs = [torch.empty(48, 32) for _ in range(w.world_size)]
    import torch.distributed as dist
    dist.all_gather(full, a)  # gloo: every rank's a and b, for the reference
    dist.all_gather(bs, b.t().contiguous())
    out = []
    for _ in range(3):
        t0 = time.perf_counter()
        c = ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine_persistent",
                               chunk_rows=chunk_rows)
        out.append(time.perf_counter() - t0)
    seg = 128 // w.world_size
    refs = [x @ y.t() for x, y in zip(full, bs, strict=True)]
    ref = sum(r[w.rank * seg:(w.rank + 1) * seg] for r in refs)
    err = float((c - ref).abs().max())
    return out, err


if __name__ == "__main__":
    for rows in (64, 16):
        res = ditron.launch(case, 2, rows, backend="cpu")
        print(sys.argv[1], "chunk_rows", rows, "seconds per call", [round(t, 2) for t in res[0][0]],
              "max err", max(r[1] for r in res))
