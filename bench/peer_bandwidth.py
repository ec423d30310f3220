"""Copy-engine ceilings: peer copy bandwidth between GPU pairs, one way and both ways.

One process sees every GPU. For each ordered pair (0 -> d) a ``--size`` buffer is copied
with ``Tensor.copy_`` (``cudaMemcpyPeerAsync``: the copy engines, no SMs); both ways runs
the two directions at once on two streams. Fixed warm-up and iteration counts, CUDA events,
median. With one GPU it measures a device-to-device copy (the HBM ceiling; bytes read plus
written) and says that no peer exists.

    python bench/peer_bandwidth.py [--size 256M] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch


def _parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _time(fn, streams, warmup: int = 3, iters: int = 10) -> float:
    """Median seconds of ``fn()`` (which issues work on ``streams``)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        start = [torch.cuda.Event(enable_timing=True) for _ in streams]
        end = [torch.cuda.Event(enable_timing=True) for _ in streams]
        for s, e in zip(streams, start, strict=True):
            e.record(s)
        fn()
        for s, e in zip(streams, end, strict=True):
            e.record(s)
        torch.cuda.synchronize()
        out.append(max(a.elapsed_time(b) for a, b in zip(start, end, strict=True)) / 1e3)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="256M")
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = p.parse_args()
    nbytes = _parse_bytes(args.size)
    n = torch.cuda.device_count()
    rows = []
    if n < 2:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
        dst = torch.empty_like(src)
        stream = torch.cuda.current_stream()
        t = _time(lambda: dst.copy_(src, non_blocking=True), [stream])
        rows.append(dict(kind="d2d (no peer GPU)", src=0, dst=0, bytes=nbytes, us=t * 1e6,
                         GBps_read_plus_write=2 * nbytes / t / 1e9))
    for d in range(1, n):
        bufs = {g: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{g}") for g in (0, d)}
        back = {g: torch.empty_like(bufs[g]) for g in (0, d)}
        s0 = torch.cuda.Stream(device=0)
        s1 = torch.cuda.Stream(device=d)
        peer = torch.cuda.can_device_access_peer(0, d)

        def one_way(b=bufs, k=back, s=s0, d=d):
            with torch.cuda.stream(s):
                k[d].copy_(b[0], non_blocking=True)

        def both_ways(b=bufs, k=back, s=(s0, s1), d=d):
            with torch.cuda.stream(s[0]):
                k[d].copy_(b[0], non_blocking=True)
            with torch.cuda.stream(s[1]):
                k[0].copy_(b[d], non_blocking=True)

        t1 = _time(one_way, [s0])
        t2 = _time(both_ways, [s0, s1])
        rows.append(dict(kind="peer one way", src=0, dst=d, p2p=peer, bytes=nbytes,
                         us=t1 * 1e6, GBps=nbytes / t1 / 1e9))
        rows.append(dict(kind="peer both ways", src=0, dst=d, p2p=peer, bytes=2 * nbytes,
                         us=t2 * 1e6, GBps=2 * nbytes / t2 / 1e9))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peer_bandwidth.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(0), gpus=n, rows=rows), f, indent=1)
    for r in rows:
        bw = r.get("GBps", r.get("GBps_read_plus_write"))
        print(f"{r['kind']:<20} {r['src']}->{r['dst']}  {r['bytes'] / 2**20:8.0f} MiB  "
              f"{r['us']:10.1f} us  {bw:8.1f} GB/s")


if __name__ == "__main__":
    main()
