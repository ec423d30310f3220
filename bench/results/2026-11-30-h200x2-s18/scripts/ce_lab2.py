"""Do local copies or sums slow the copy engines' peer traffic? Two processes, 512 MiB
each way by one pull or push per rank (as ce_lab.py), with local work of the same size on
a second stream at the same time: a ``copy_`` (cudaMemcpy D2D), a copy by an elementwise
kernel (bitwise_or with 0 on int16 views: SMs), or a sum ``add(a, b, out=c)`` (SMs).
``alone`` rows: the local work by itself. us per round, 8 rounds back to back, median of
5 samples, the slower rank's."""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

import ditron

ROUNDS = 8


def local_work(kind: str, a, b, c):
    if kind == "cecopy":
        return lambda: c.copy_(a)
    if kind == "smcopy":
        return lambda: torch.bitwise_or(a.view(torch.int16), 0, out=c.view(torch.int16))
    if kind == "sum":
        return lambda: torch.add(a, b, out=c)
    return None


def body(mib: int) -> list[str]:
    w = ditron.world()
    p = 1 - w.rank
    n = (mib << 20) // 2
    src = ditron.empty(n, torch.bfloat16)
    dst = ditron.empty(n, torch.bfloat16)
    src.copy_(torch.randn(n, device=w.device).bfloat16())
    a, b, c = (torch.randn(n, device=w.device).bfloat16() for _ in range(3))
    torch.cuda.synchronize()
    ditron.barrier()
    src_p, dst_p = ditron.peer(src, p), ditron.peer(dst, p)
    side, loc = torch.cuda.Stream(), torch.cuda.Stream()
    main = torch.cuda.current_stream()
    res = {}
    for kind in ("pull", "push", "none"):
        for lw in ("none", "cecopy", "smcopy", "sum"):
            if kind == "none" and lw == "none":
                continue
            move = {"pull": lambda: dst.copy_(src_p), "push": lambda: dst_p.copy_(src)}.get(kind)
            other = local_work(lw, a, b, c)
            samples = []
            for it in range(6):
                torch.cuda.synchronize()
                ditron.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(400_000)
                start.record(main)
                for _ in range(ROUNDS):
                    for s, fn in ((side, move), (loc, other)):
                        if fn is not None:
                            s.wait_stream(main)
                            with torch.cuda.stream(s):
                                fn()
                    main.wait_stream(side)
                    main.wait_stream(loc)
                end.record(main)
                end.synchronize()
                if it:
                    samples.append(start.elapsed_time(end) * 1e3 / ROUNDS)
            res[f"{kind}+{lw}" if kind != "none" else f"{lw} alone"] = statistics.median(samples)
    torch.cuda.synchronize()
    ditron.barrier()
    t = torch.tensor(list(res.values()), dtype=torch.float64, device=w.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    lines = [f"{mib} MiB each way"]
    for name, us in zip(res, t.tolist(), strict=True):
        lines.append(f"  {name:14s} {us:9.1f} us  {(mib << 20) / us / 1e3:7.1f} GB/s")
    return lines


if __name__ == "__main__":
    print("\n".join(ditron.launch(body, 2, 512, backend="cuda")[0]))
