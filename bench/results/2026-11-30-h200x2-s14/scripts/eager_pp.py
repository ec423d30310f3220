"""s14f: eager GEMM-RS 8192x3584x(14336/2) on 2 GPUs: pulled engine against the persistent
pulled engine on all SMs and on all but one; batches of 5 calls, rotating rounds."""
from __future__ import annotations

import dataclasses
import statistics

import torch

import ditron
from ditron.kernels.gemm import GPU_CONFIG


def case(N: int, K: int) -> dict:
    w = ditron.world()
    a = torch.randn(8192, K, device=w.device, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=w.device, dtype=torch.bfloat16).t()
    sms = torch.cuda.get_device_properties(w.device).multi_processor_count
    variants = {
        "pull": dict(engine="copy_engine_pull"),
        "pp all SMs": dict(engine="copy_engine_pull_persistent", config=GPU_CONFIG),
        "pp SMs-1": dict(engine="copy_engine_pull_persistent",
                         config=dataclasses.replace(GPU_CONFIG, programs=sms - 1)),
    }
    times = {k: [] for k in variants}
    for kw in variants.values():
        for _ in range(3):
            ditron.ops.gemm_rs(a, b, method="overlap", **kw)
    torch.cuda.synchronize()
    names = list(variants)
    for r in range(12):
        for name in names[r % 3:] + names[:r % 3]:
            torch.distributed.barrier()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(5):
                ditron.ops.gemm_rs(a, b, method="overlap", **variants[name])
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e3 / 5)
    return {k: round(statistics.median(v), 1) for k, v in times.items()}


if __name__ == "__main__":
    for shape in ((3584, 7168), (4096, 5504)):
        print(shape, ditron.launch(case, 2, *shape, backend="cuda"), flush=True)
