"""s34: does an L2 prefetch issued ahead of time speed up a latency-bound weight stream?

A few programs (like a megakernel's up tiles) each stream a contiguous slice of a weight
buffer; timed cold (L2 flushed), after a prefetch kernel (``cp.async.bulk.prefetch.L2`` or
``prefetch.global.L2`` per line) ran and finished, and warm (streamed twice).
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def stream(w, out, PER: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = w + pid * PER
    acc = tl.zeros([BLOCK], tl.float32)
    for k in tl.range(0, PER, BLOCK, num_stages=3):
        acc += tl.load(base + k + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(out + pid, tl.sum(acc))


@triton.jit
def bulk_prefetch(addr, nbytes, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(addr + offs, mask=m, other=0)
    b = tl.load(nbytes + offs, mask=m, other=0)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r", [a, b, m.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def line_prefetch(w, n_lines, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_lines
    a = (w + offs.to(tl.int64) * 64)  # bf16: 64 elements per 128-byte line
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
        "=r,l,r", [a, m.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


def main() -> None:
    dev = torch.device("cuda")
    programs, per = int(sys.argv[1]), int(sys.argv[2])  # per: elements per program
    w = torch.randn(programs * per, device=dev, dtype=torch.bfloat16)
    out = torch.empty(programs, device=dev, dtype=torch.float32)
    flush = torch.empty(512 << 20, device=dev, dtype=torch.uint8)
    chunk = 1 << 20  # bytes per bulk prefetch
    total = w.numel() * 2
    starts = torch.arange(0, total, chunk, device=dev, dtype=torch.int64)
    addr = starts + w.data_ptr()
    nbytes = torch.clamp(total - starts, max=chunk).to(torch.int32)
    n = addr.numel()
    kern = bulk_prefetch.warmup(addr, nbytes, n, BLOCK=128, grid=(1,))
    print("bulk in ptx:", "cp.async.bulk.prefetch" in kern.asm["ptx"])
    kern2 = line_prefetch.warmup(w, total // 128, BLOCK=128, grid=(1,))
    print("line in ptx:", "prefetch.global.L2" in kern2.asm["ptx"])
    ref = w.float().view(programs, per).sum(1)

    def run_stream():
        stream[(programs,)](w, out, PER=per, BLOCK=4096)

    def timed(prep):
        times = []
        for _ in range(20):
            flush.zero_()
            prep()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run_stream()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        times.sort()
        return times[len(times) // 2]

    run_stream()
    torch.cuda.synchronize()
    assert torch.allclose(out, ref, rtol=1e-2, atol=1.0), (out - ref).abs().max()
    cases = {
        "cold": lambda: None,
        "bulk prefetch": lambda: bulk_prefetch[(triton.cdiv(n, 128),)](addr, nbytes, n,
                                                                        BLOCK=128),
        "line prefetch": lambda: line_prefetch[(triton.cdiv(total // 128, 128),)](
            w, total // 128, BLOCK=128),
        "warm": run_stream,
    }
    mb = total / 1e6
    for name, prep in cases.items():
        t = timed(prep)
        print(f"programs {programs} x {per * 2 / 1024:.0f} KB ({mb:.1f} MB): {name:14s} "
              f"{t:8.2f} us  {total / t / 1e3:7.1f} GB/s")


if __name__ == "__main__":
    main()
