"""Host us per call (GPU head start) of single steps on one GPU: the landing kernel's launch,
its pieces (context, programs, a view), a driver memcpy, a torch.add, torch.empty."""

from __future__ import annotations

import statistics
import time

import torch

import ditron

CYC = 1980
N = 200


def host(fn):
    res = []
    for _ in range(5):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(40 * 1000 * CYC))
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        res.append((time.perf_counter() - t0) * 1e6 / N)
    torch.cuda.synchronize()
    return statistics.median(res), min(res)


def body():
    from ditron.kernels import landing
    from ditron.ops import exchange
    from ditron.runtime import stream_memops
    from ditron.runtime.world import current

    rt = current()
    dev = rt.world.device
    c = 24 << 20
    inbox = torch.zeros(2 * c, dtype=torch.bfloat16, device=dev)
    own = torch.zeros(c, dtype=torch.bfloat16, device=dev)
    out = torch.empty(c, dtype=torch.bfloat16, device=dev)
    small = torch.zeros(4096, dtype=torch.bfloat16, device=dev)
    ready = torch.zeros(4, dtype=torch.int64, device=dev)
    ctx = rt.context()
    s = torch._C._cuda_getCurrentRawStream(dev.index)
    a, b = torch.zeros(1024, device=dev), torch.zeros(1024, device=dev)
    o = torch.empty(1024, device=dev)
    steps = {
        "land 48MB rs (ctx built once)": lambda: landing.land(
            own, inbox, out, ready, c, c // 3, 64, ctx, 132, True),
        "land tiny (ctx built once)": lambda: landing.land(
            small, small, small, ready, 4096, 4096, 64, ctx, 132, True),
        "land tiny + rt.context()": lambda: landing.land(
            small, small, small, ready, 4096, 4096, 64, rt.context(), 132, True),
        "rt.context()": lambda: rt.context(),
        "_landing_programs": lambda: exchange._landing_programs(dev),
        "landing_chunks": lambda: exchange.landing_chunks(c, 2),
        "torch.empty 48MB": lambda: torch.empty(c, dtype=torch.bfloat16, device=dev),
        "memcpy 4KB": lambda: stream_memops.memcpy(s, o.data_ptr(), a.data_ptr(), 4096),
        "write_value": lambda: stream_memops.write_value(s, ready.data_ptr(), 0),
        "torch.add 1K": lambda: torch.add(a, b, out=o),
        "torch.cuda.current_device": lambda: torch.cuda.current_device(),
    }
    lines = []
    for name, fn in steps.items():
        for _ in range(5):
            fn()
        med, best = host(fn)
        lines.append(f"{name:34s} host {med:7.2f} us (best batch {best:.2f})")
    return lines


if __name__ == "__main__":
    print("\n".join(ditron.launch(body, 1, backend="cuda")[0]))
