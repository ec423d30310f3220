"""s15f: GEMM-RS 8192 x 4608 x 18432 on 2 GPUs under CUDA graphs, before and after a tuner
pass in the same process (the benchmark's order), to see whether the benchmark's graph
figures for the overlapped variants (2175-2190 us in s15d against 1985-2006 in s15b's lab)
come from the process's state; then the same after capturing the benchmark's other
candidates too."""
from __future__ import annotations

import json
import os
import sys

import torch

import ditron
from ditron.ops.graphs import capture

sys.path.insert(0, os.path.dirname(__file__))
from rs_early_lab import CALLS, timed  # noqa: E402

N, K = 4608, 18432


def variants(a, b) -> dict:
    def rs(**kw):
        return lambda: ditron.ops.gemm_rs(a, b, method="overlap", **kw)

    return {"gemm": lambda: torch.matmul(a, b),
            "base": lambda: ditron.ops.gemm_rs(a, b, method="fallback"),
            "ce": rs(engine="copy_engine"),
            "ce+1536": rs(engine="copy_engine", early_rows=1536),
            "pull": rs(engine="copy_engine_pull"),
            "pull1024": rs(engine="copy_engine_pull", chunk_rows=1024)}


def graphs_of(fns: dict) -> dict:
    return {k: capture(fn, CALLS, safe_warm_up=k not in ("gemm", "base"))
            for k, fn in fns.items()}


def case() -> dict:
    from ditron.tune.tuner import tune

    w = ditron.world()
    torch.manual_seed(w.rank)
    a = torch.randn(8192, K, device=w.device, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=w.device, dtype=torch.bfloat16).t()
    fns = variants(a, b)
    out = {"fresh": timed(graphs_of(fns), 6, graph=True)}
    out["fresh eager"] = timed(fns, 6, graph=False)
    tune("gemm_rs", 8192, N, K, torch.bfloat16, progress=w.rank == 0)
    out["after tuner"] = timed(graphs_of(fns), 6, graph=True)
    out["after tuner eager"] = timed(fns, 6, graph=False)
    extra = {"auto": lambda: ditron.ops.gemm_rs(a, b),
             "colocated": lambda: ditron.ops.gemm_rs(a, b, method="overlap")}
    g = graphs_of(fns)
    g.update({k: capture(fn, CALLS) for k, fn in extra.items()})
    out["with auto, colocated"] = timed(g, 6, graph=True)
    return out


if __name__ == "__main__":
    res = ditron.launch(case, 2, backend="cuda")[0]
    d = os.environ.get("OUT", ".") + "/s15f"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/rs_state_lab.json", "w") as f:
        json.dump(res, f, indent=1)
    for phase, t in res.items():
        tg = t["gemm"]
        print(f"{phase:22s} " + "  ".join(
            f"{k} {v:.1f}" + (f" ({tg / v:.3f})" if k != "gemm" else "") for k, v in t.items()),
            flush=True)
