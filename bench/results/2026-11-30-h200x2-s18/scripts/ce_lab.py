"""Copy-engine ceilings both ways, as the collectives see them: two processes, one GPU
each, symmetric buffers, every copy issued on the issuing rank's own streams.

Every variant moves N bytes each way at once:
- pull_k: rank r copies its peer's ``src`` into its own ``dst``, cut over k streams;
- push_k: rank r copies its own ``src`` into its peer's ``dst``, cut over k streams;
- mix_k: rank r pushes the first half of what it sends and pulls the second half of what
  it receives (k streams for each).
Timing per rank: host barrier, a sleep kernel that holds the streams while the host queues
``ROUNDS`` rounds back to back (each round's copies start after the last round's join), CUDA
events around the rounds; us per round, median of 5 samples, the slower rank's.
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

import ditron

ROUNDS = 8


def cut(streams, dst, src, k: int) -> list:
    """``dst.copy_(src)`` as k (stream, dst piece, src piece) jobs."""
    n = dst.numel()
    return [(streams[i], dst[i * n // k:(i + 1) * n // k], src[i * n // k:(i + 1) * n // k])
            for i in range(k)]


def work(kind: str, k: int, streams, src, dst, src_p, dst_p) -> list:
    if kind == "pull":
        return cut(streams, dst, src_p, k)
    if kind == "push":
        return cut(streams, dst_p, src, k)
    h = dst.numel() // 2
    return cut(streams, dst_p[:h], src[:h], k) + cut(streams[k:], dst[h:], src_p[h:], k)


def body(sizes_mib: list[int]) -> list[str]:
    w = ditron.world()
    r, p = w.rank, 1 - w.rank
    streams = [torch.cuda.Stream() for _ in range(8)]
    main = torch.cuda.current_stream()
    lines = []
    for mib in sizes_mib:
        n = (mib << 20) // 2
        src = ditron.empty(n, torch.bfloat16)
        dst = ditron.empty(n, torch.bfloat16)
        src.copy_(torch.randn(n, device=w.device).bfloat16())
        torch.cuda.synchronize()
        ditron.barrier()
        src_p, dst_p = ditron.peer(src, p), ditron.peer(dst, p)

        lines.append(f"{mib} MiB each way (rank {r})")
        res = {}
        for kind in ("pull", "push", "mix"):
            for k in (1, 2, 4):
                jobs = work(kind, k, streams, src, dst, src_p, dst_p)
                samples = []
                for it in range(6):
                    torch.cuda.synchronize()
                    ditron.barrier()
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(400_000)
                    start.record(main)
                    for _ in range(ROUNDS):
                        for s, _, _ in jobs:
                            s.wait_stream(main)
                        for s, d, sv in jobs:
                            with torch.cuda.stream(s):
                                d.copy_(sv, non_blocking=True)
                        for s, _, _ in jobs:
                            main.wait_stream(s)
                    end.record(main)
                    end.synchronize()
                    if it:
                        samples.append(start.elapsed_time(end) * 1e3 / ROUNDS)
                res[f"{kind}_{k}"] = statistics.median(samples)
        torch.cuda.synchronize()
        ditron.barrier()
        if not torch.equal(dst, src_p):
            raise SystemExit(f"rank {r}: wrong data after the last variant")
        t = torch.tensor(list(res.values()), dtype=torch.float64, device=w.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        for name, us in zip(res, t.tolist(), strict=True):
            gbs = (mib << 20) / us / 1e3
            lines.append(f"  {name:8s} {us:9.1f} us  {gbs:7.1f} GB/s per direction")
        ditron.barrier()
        ditron.free(src)
        ditron.free(dst)
    return lines


if __name__ == "__main__":
    out = ditron.launch(body, 2, [128, 512], backend="cuda")
    print("\n".join(out[0]))
