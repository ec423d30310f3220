"""AG-GEMM on 2 GPUs with its pushes on SMs beside the persistent GEMM: the load/store
engine ("sm") against bulk tensor copies ("tma") at 16 and 32 SMs for communication, with the
copy engine (no SMs) and cuBLAS + NCCL in the same rotating rounds. M = 8192, bf16, the
bench's AG shapes, batches of 4 calls, us per call (slowest rank's median).

    python3 scripts/ag_tma_lab.py [--shapes 0,1]
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch
import torch.distributed as dist

import ditron
from ditron.benchmarks.tp_gemm import AG_SHAPES
from ditron.kernels.gemm import default_config
from ditron.tune.tuner import agreed_median, rotations, time_calls

M = 8192


def _one(N: int, K: int, W: int, dev, sms: int, base_cfg):
    a = torch.randn(M // W, K, device=dev).to(torch.bfloat16)
    b = torch.randn(N // W, K, device=dev).to(torch.bfloat16).t()
    full = torch.empty(M, K, device=dev, dtype=torch.bfloat16)
    cands = {"t_gemm": lambda: torch.matmul(full, b),
             "t_comm": lambda: dist.all_gather_into_tensor(full, a),
             "baseline": lambda: ditron.ops.ag_gemm(a, b, method="fallback"),
             "copy_engine": lambda: ditron.ops.ag_gemm(a, b, method="overlap",
                                                       engine="copy_engine")}
    for eng in ("sm", "tma"):
        for k in (16, 32):
            cfg = dataclasses.replace(base_cfg, programs=sms - k)
            cands[f"{eng}{k}"] = (lambda e=eng, c=cfg: ditron.ops.ag_gemm(
                a, b, method="overlap", engine=e, config=c))
    # each engine once against the fallback (the result is the same math)
    ref = ditron.ops.ag_gemm(a, b, method="fallback")
    errs = {n: (cands[n]() - ref).abs().max().item()
            for n in ("copy_engine", "sm16", "tma16", "tma32")}
    samples = {n: [] for n in cands}
    for r, order in enumerate(rotations(list(cands), 3)):
        for n in order:
            samples[n] += time_calls(cands[n], 3 if r == 0 else 1, 4, dev, 4)
    return {n: agreed_median(t) for n, t in samples.items()}, errs


def body(idx: list[int]):
    w = ditron.world()
    dev = w.device
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    base_cfg = default_config(dev, torch.bfloat16)
    rows = []
    for i in idx:
        N, K = AG_SHAPES[i]
        torch.manual_seed(w.rank)
        med, errs = _one(N, K, w.world_size, dev, sms, base_cfg)
        rows.append((N, K, med, errs))
    return rows


if __name__ == "__main__":
    idx = list(range(len(AG_SHAPES)))
    if "--shapes" in sys.argv:
        idx = [int(x) for x in sys.argv[sys.argv.index("--shapes") + 1].split(",")]
    os.environ.setdefault("DITRON_HEAP_SIZE", "8G")
    res = ditron.launch(body, 2, idx, backend="cuda")
    for N, K, med, errs in res[0]:
        bound = max(med["t_gemm"], med["t_comm"])
        print(f"N={N} K={K}: " + "  ".join(f"{n} {t:.1f}" for n, t in med.items()))
        print("   eff: " + "  ".join(f"{n} {bound / t:.3f}" for n, t in med.items()
                                     if n not in ("t_gemm", "t_comm")))
        print("   max |err| vs fallback: " + "  ".join(f"{n} {e:.3g}" for n, e in errs.items()))
