"""Host time per eager call of the pulled GEMM-RS (two ranks; the GPU sleeps first so the
host never waits): the publishes on the signal lane or on the compute stream, in rotating
rounds in one process; ACK_BY_DATA comes from the environment (a process-wide choice)."""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron
from ditron.ops import exchange
from ditron.runtime.world import current


def case(m: int, n: int, k: int, calls: int, rounds: int) -> dict:
    w = ditron.world()
    W, dev = w.world_size, w.device
    a = torch.randn(m, k // W, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k // W, device=dev, dtype=torch.bfloat16).t()

    def f():
        return ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine_pull")

    full = None
    samples: dict[str, list[float]] = {"lane": [], "compute": []}
    for r in range(rounds):
        for name in (("lane", "compute") if r % 2 == 0 else ("compute", "lane")):
            exchange.EAGER_SIGNAL_LANE = name == "lane"
            for _ in range(2):
                out = f()
            torch.cuda.synchronize()
            dist.barrier(group=current().host_group)
            torch.cuda._sleep(int(80e3 * 1980))  # ~80 ms: the host runs ahead
            t0 = time.perf_counter()
            for _ in range(calls):
                out = f()
            samples[name].append((time.perf_counter() - t0) * 1e6 / calls)
            torch.cuda.synchronize()
            if full is None:
                full = out.float().abs().mean().item()
    return {k2: round(statistics.median(v), 1) for k2, v in samples.items()} | {
        "all": {k2: [round(x, 1) for x in v] for k2, v in samples.items()},
        "ack_by_data": exchange.ACK_BY_DATA}


if __name__ == "__main__":
    shape = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8192,4096,11008").split(",")]
    res = ditron.launch(case, 2, *shape, 20, 6, backend="cuda")
    for rank, row in enumerate(res):
        print(f"rank {rank}: host us per call {row}")
