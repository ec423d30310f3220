"""Copy-engine ceilings: peer copy bandwidth between GPU pairs, one way and both ways.

One process sees every GPU. For each ordered pair (0 -> d) a ``--size`` buffer is copied
with ``Tensor.copy_`` (``cudaMemcpyPeerAsync``: the copy engines, no SMs); both ways runs
the two directions at once on two streams. Fixed warm-up and iteration counts, CUDA events,
median. With one GPU it measures a device-to-device copy (the HBM ceiling; bytes read plus
written) and says that no peer exists.

``--sm``: also the same transfers made by a load/store kernel on the SMs (each GPU pulls
from its peer, ``--programs`` programs of 16384-element steps), and *hybrid* splits where the
copy engine moves a fraction ``f`` of the bytes while the kernel moves the rest at the same
time, both ways: is the link's ceiling above what either engine reaches alone?

    python bench/peer_bandwidth.py [--size 256M] [--out DIR] [--sm] [--programs 132]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def _pull(src, dst, n, BLOCK: tl.constexpr):
    """``dst[:n] = src[:n]`` (int32 words); programs stride over the blocks."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def _parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _time(fn, streams, warmup: int = 3, iters: int = 10) -> float:
    """Median seconds of ``fn()`` (which issues work on ``streams``)."""
    for _ in range(warmup):
        fn()
    for s in streams:
        s.synchronize()
    out = []
    for _ in range(iters):
        start = [torch.cuda.Event(enable_timing=True) for _ in streams]
        end = [torch.cuda.Event(enable_timing=True) for _ in streams]
        for s, e in zip(streams, start, strict=True):
            e.record(s)
        fn()
        for s, e in zip(streams, end, strict=True):
            e.record(s)
        for s in streams:
            s.synchronize()
        out.append(max(a.elapsed_time(b) for a, b in zip(start, end, strict=True)) / 1e3)
    return statistics.median(out)


def _sm_rows(bufs, back, d: int, nbytes: int, programs: int) -> list[dict]:
    """Kernel pulls (GPU g reads its peer's buffer) one way, both ways, and hybrid splits."""
    words = nbytes // 4
    src = {g: bufs[g].view(torch.int32)[:words] for g in (0, d)}
    dst = {g: back[g].view(torch.int32)[:words] for g in (0, d)}
    peer_of = {0: d, d: 0}
    ce = {g: torch.cuda.Stream(device=g) for g in (0, d)}
    sm = {g: torch.cuda.Stream(device=g) for g in (0, d)}

    def issue(gpus, frac: float):
        cut = int(words * frac) // 4096 * 4096
        for g in gpus:  # g pulls from its peer: words [0, cut) by DMA, the rest by SMs
            q = peer_of[g]
            if cut:
                with torch.cuda.stream(ce[g]):
                    dst[g][:cut].copy_(src[q][:cut], non_blocking=True)
            if cut < words:
                with torch.cuda.device(g), torch.cuda.stream(sm[g]):
                    _pull[(programs,)](src[q][cut:], dst[g][cut:], words - cut, BLOCK=16384,
                                       num_warps=16)

    rows = []
    for gpus, kind, moved in (((d,), "sm one way", nbytes), ((0, d), "sm both ways", 2 * nbytes)):
        streams = [sm[g] for g in gpus]
        t = _time(lambda gpus=gpus: issue(gpus, 0.0), streams)
        rows.append(dict(kind=kind, src=0, dst=d, bytes=moved, us=t * 1e6, GBps=moved / t / 1e9))
    for frac in (0.5, 0.6, 0.7, 0.8, 0.9):
        streams = [s for g in (0, d) for s in (ce[g], sm[g])]
        t = _time(lambda f=frac: issue((0, d), f), streams)
        rows.append(dict(kind=f"hybrid both ways ce={frac:.1f}", src=0, dst=d, bytes=2 * nbytes,
                         us=t * 1e6, GBps=2 * nbytes / t / 1e9))
    for r in rows:  # printed before the check, so that a failed check keeps the figures
        print(f"{r['kind']:<28} {r['src']}->{r['dst']}  {r['us']:10.1f} us  "
              f"{r['GBps']:8.1f} GB/s", flush=True)
    issue((0, d), 0.6)
    for g in (0, d):
        torch.cuda.synchronize(g)
    for g in (0, d):
        if not torch.equal(dst[g], src[peer_of[g]].to(dst[g].device)):
            raise SystemExit(f"peer_bandwidth: hybrid copy into GPU {g} is wrong")
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="256M")
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    p.add_argument("--sm", action="store_true")
    p.add_argument("--programs", type=int, default=132)
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
        if args.sm:
            rows += _sm_rows(bufs, back, d, nbytes, args.programs)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peer_bandwidth.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(0), gpus=n, rows=rows), f, indent=1)
    for r in rows:
        bw = r.get("GBps", r.get("GBps_read_plus_write"))
        print(f"{r['kind']:<20} {r['src']}->{r['dst']}  {r['bytes'] / 2**20:8.0f} MiB  "
              f"{r['us']:10.1f} us  {bw:8.1f} GB/s")


if __name__ == "__main__":
    main()
