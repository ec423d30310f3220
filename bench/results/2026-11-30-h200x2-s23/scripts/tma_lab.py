"""Engine-level A/B on 2 GPUs: the tma engine against the sm engine (same programs), pushes
and pulls, both ranks at once (both link directions busy), CUDA events, medians.

    python3 scripts/tma_lab.py
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import ditron
from ditron.engines import Transfer, get_engine

SIZES = [16 << 20, 64 << 20, 256 << 20]
if os.environ.get("LAB_SIZES"):
    SIZES = [int(x) << 20 for x in os.environ["LAB_SIZES"].split(",")]
if os.environ.get("LAB_CPU"):
    SIZES = [4096, 8192]
CONFIGS = [("sm", {"programs": p}) for p in (8, 16, 32)] + \
    [("tma", {"programs": p, "block_rows": b, "stages": st}) for p in (8, 16, 32)
     for b in (64, 128) for st in (1, 2, 3)]
if os.environ.get("LAB_SET") == "defaults":  # the engines' defaults but programs
    CONFIGS = [(name, {"programs": p}) for p in (8, 16, 32, 132) for name in ("sm", "tma")]
ITERS, WARM = 15, 3
if os.environ.get("LAB_CPU"):
    CONFIGS = [("sm", {"programs": 2}), ("tma", {"programs": 2, "block_rows": 4})]
    ITERS, WARM = 2, 1


def body():
    w = ditron.world()
    me, peer = w.rank, 1 - w.rank
    dev = w.device
    nmax = max(SIZES) // 2
    inbox = ditron.empty((nmax,), torch.bfloat16)
    mine = torch.randn(nmax, device=dev).to(torch.bfloat16)
    local = torch.empty(nmax, dtype=torch.bfloat16, device=dev)
    rows = []
    for name, opts in CONFIGS:
        eng = get_engine(name, **opts)
        try:  # a config that does not compile or fit is reported, not fatal
            eng.issue([Transfer(mine[:4096], inbox[:4096], me, peer)])
            eng.drain()
        except Exception as exc:  # noqa: BLE001
            rows.append((name, str(opts), "error", 0, float("nan")))
            print(f"rank {me} {name} {opts}: {type(exc).__name__}: {str(exc)[:300]}")
            ditron.barrier()
            continue
        for size in SIZES:
            n = size // 2
            for mode in ("push", "pull"):
                if mode == "push":
                    ts = [Transfer(mine[:n], inbox[:n], me, peer)]
                else:
                    ts = [Transfer(inbox[:n], local[:n], peer, me)]
                for _ in range(WARM):
                    eng.issue(ts)
                eng.drain()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                times = []
                for _ in range(ITERS):
                    ditron.barrier()
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
                    if dev.type == "cpu":
                        t0 = time.perf_counter()
                        eng.issue(ts)
                        eng.drain()
                        times.append((time.perf_counter() - t0) * 1e6)
                        continue
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    eng.issue(ts)
                    eng.drain()
                    b.record()
                    torch.cuda.synchronize()
                    times.append(a.elapsed_time(b) * 1e3)
                med = statistics.median(times)
                rows.append((name, str(opts), mode, size, med))
        ditron.barrier()
    return rows


if __name__ == "__main__":
    res = ditron.launch(body, 2, backend="cpu" if os.environ.get("LAB_CPU") else "cuda")
    print(f"{'engine':6s} {'options':38s} {'mode':5s} {'size':>6s} {'us r0':>9s} {'us r1':>9s} "
          f"{'GB/s per direction':>19s}")
    for r0, r1 in zip(res[0], res[1], strict=True):
        name, opts, mode, size, t0 = r0
        t1 = r1[4]
        t = max(t0, t1)
        print(f"{name:6s} {opts:38s} {mode:5s} {size >> 20:5d}M {t0:9.1f} {t1:9.1f} "
              f"{size / t / 1e3:19.1f}")
