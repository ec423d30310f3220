"""s17d: can SM traffic add to the copy engines' NVLink bandwidth? An all-gather of S bytes
as the copy engine's pulls of a (1 - f) share on a side stream beside the fused SM
all-gather of the f share (DITRON_FUSED_PROGRAMS programs) on the main stream, against the
copy engine alone and NCCL; calls back to back, events between calls, median us per call
(outputs stay in two tensors: the movement only)."""
import os
import statistics
import sys

import torch
import torch.distributed as dist

import ditron


def busy(fn, iters=30, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ditron.barrier()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return statistics.median(a.elapsed_time(b) * 1e3 for a, b in zip(ev, ev[1:], strict=False))


def body(nbytes, shares, programs):
    w = ditron.world()
    n = nbytes // 2 // w.world_size
    x = torch.randn(n, device=w.device).bfloat16()
    out = torch.empty(n * w.world_size, device=w.device, dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    res = {"nccl": busy(lambda: dist.all_gather_into_tensor(out, x)),
           "ce": busy(lambda: ditron.ops.all_gather(x, engine="copy_engine"))}
    for p in programs:
        os.environ["DITRON_FUSED_PROGRAMS"] = str(p)
        for f in shares:
            k = int(n * f) // 1024 * 1024
            xs, xc = x[:k], x[k:]

            def hybrid(xs=xs, xc=xc):
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    a = ditron.ops.all_gather(xc, engine="copy_engine")
                b = ditron.ops.all_gather(xs, engine="sm")
                torch.cuda.current_stream().wait_stream(side)
                a.record_stream(torch.cuda.current_stream())
                return a, b
            res[f"hyb f={f} p={p}"] = busy(hybrid)
            alone = busy(lambda xs=xs: ditron.ops.all_gather(xs, engine="sm"))
            res[f"sm alone f={f} p={p}"] = alone
    t = torch.tensor(list(res.values()), dtype=torch.float64, device=w.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=None)
    return dict(zip(res, t.tolist(), strict=True))


if __name__ == "__main__":
    for size in (256 << 20, 1 << 30):
        r = ditron.launch(body, 2, size, (0.1, 0.2, 0.3), (16, 32), backend="cuda")[0]
        base = r["nccl"]
        print(f"size {size >> 20} MB: " + "  ".join(f"{k} {v:.1f} ({base / v:.2f}x)"
                                                    for k, v in r.items()), flush=True)
    sys.exit(0)
