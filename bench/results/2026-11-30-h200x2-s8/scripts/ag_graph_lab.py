"""Lab (session 8): why AG-GEMM under CUDA graphs can be slower than eager on big shapes.

Hypothesis: the graph-safe variant's push waits (a spinning one-program kernel on the copy
engine's stream, for the peer's ack of the previous call) hold one SM while the persistent
GEMM (one program per SM) runs, so one GEMM program starts late. Compare under graphs:
default programs vs one program fewer than SMs; plus eager for reference.
"""
from __future__ import annotations

import argparse
import dataclasses

import torch
import torch.distributed as dist


def rank_main(shapes, batch, rounds):
    import ditron
    from ditron.benchmarks.tp_gemm import _capture
    from ditron.kernels.gemm import default_config
    from ditron.tune.tuner import agreed_median, time_calls

    w = ditron.world()
    W, dev = w.world_size, w.device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    out = []
    for (M, N, K) in shapes:
        torch.manual_seed(w.rank)
        a = torch.randn(M // W, K, device=dev).bfloat16()
        b = torch.randn(N // W, K, device=dev).bfloat16().t()
        full = torch.empty(M, K, device=dev, dtype=a.dtype)
        cfg = default_config(dev, a.dtype)
        cfg_m1 = dataclasses.replace(cfg, programs=sms - 1)
        cands = {
            "gemm": lambda full=full, b=b: torch.matmul(full, b),
            "baseline": lambda a=a, b=b: ditron.ops.ag_gemm(a, b, method="fallback"),
            "overlap": lambda a=a, b=b: ditron.ops.ag_gemm(a, b, method="overlap"),
            "overlap_p-1": lambda a=a, b=b, c=cfg_m1: ditron.ops.ag_gemm(a, b, method="overlap",
                                                                        config=c),
        }
        graphs = {n: _capture(f, batch, graph_safe=n.startswith("overlap"))
                  for n, f in cands.items()}
        res = {}
        names = list(cands)
        samples = {f"eager_{n}": [] for n in names} | {f"graph_{n}": [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                samples[f"eager_{n}"] += time_calls(cands[n], 2 if r == 0 else 1, 3, dev, batch)
                samples[f"graph_{n}"] += [t / batch for t in time_calls(
                    graphs[n].replay, 2 if r == 0 else 1, 3, dev)]
        for k, v in samples.items():
            res[k] = agreed_median(v)
        if w.rank == 0:
            line = f"ag_gemm {M}x{N}x{K}: " + "  ".join(f"{k} {v:8.1f}" for k, v in res.items())
            print(line, flush=True)
        out.append(res)
        del graphs
        torch.cuda.synchronize()
        dist.barrier()
    return out


if __name__ == "__main__":
    import ditron

    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8192x49152x12288,8192x14336x4096,8192x11008x4096")
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    ditron.launch(rank_main, 2, shapes, args.batch, args.rounds, backend="cuda")
