"""s15b: GEMM-RS on 2 GPUs, the pushed copy engine with own rows in the last peer's GEMM
(early_rows) against the other copy-engine variants, the bare local GEMM (T_gemm) and the
baseline, eager (batches of 5 calls) and under CUDA graphs (5 calls per graph), in rotating
rounds; us per call, the slower rank's median."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import ditron
from ditron.ops.graphs import capture
from ditron.runtime.world import current
from ditron.tune.tuner import rotations

SHAPES = [(4096, 5504), (4096, 7168), (3584, 7168), (4608, 18432)]
CALLS = 5


def variants(a, b, early: list[int]) -> dict:
    def rs(**kw):
        return lambda: ditron.ops.gemm_rs(a, b, method="overlap", **kw)

    out = {"gemm": lambda: torch.matmul(a, b),
           "base": lambda: ditron.ops.gemm_rs(a, b, method="fallback")}
    out.update({f"ce+{x}": rs(engine="copy_engine", early_rows=x) for x in early})
    out["pull"] = rs(engine="copy_engine_pull")
    out["pull1024"] = rs(engine="copy_engine_pull", chunk_rows=1024)
    return out


def timed(fns: dict, rounds: int, graph: bool) -> dict:
    samples = {k: [] for k in fns}
    for order in rotations(list(fns), rounds):
        for name in order:
            dist.barrier()
            if not torch.cuda.is_available():  # CPU smoke run
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    fns[name]()
                samples[name].append((time.perf_counter() - t0) * 1e6 / CALLS)
                continue
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            if graph:
                fns[name].replay()
            else:
                for _ in range(CALLS):
                    fns[name]()
            e.record()
            e.synchronize()
            samples[name].append(s.elapsed_time(e) * 1e3 / CALLS)
    med = torch.tensor([statistics.median(samples[k]) for k in fns], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX, group=current().host_group)
    return {k: round(v, 1) for k, v in zip(fns, med.tolist(), strict=True)}


def case(N: int, K: int, early: list[int]) -> dict:
    w = ditron.world()
    torch.manual_seed(w.rank)
    rows = 8192 if w.device.type == "cuda" else 64
    a = torch.randn(rows, K, device=w.device, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=w.device, dtype=torch.bfloat16).t()
    fns = variants(a, b, early)
    ref = ditron.ops.gemm_rs(a, b, method="fallback").float()
    for name, fn in fns.items():
        for _ in range(2):
            got = fn()
            if w.device.type == "cpu":
                got = got.float()
        if name not in ("gemm", "base"):
            err = (got.float() - ref).abs().max().item() / ref.abs().max().item()
            assert err < 2e-2, (name, err)
    eager = timed(fns, 8, graph=False)
    if w.device.type == "cpu":
        return {"eager": eager}
    graphs = {k: capture(fn, CALLS, safe_warm_up=k not in ("gemm", "base"))
              for k, fn in fns.items()}
    g = timed(graphs, 8, graph=True)
    return {"eager": eager, "graph": g}


def main() -> None:
    out = os.environ.get("OUT", ".") + "/s15b"
    os.makedirs(out, exist_ok=True)
    early = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "0,512,1152,2048").split(",")]
    res = {}
    smoke = not torch.cuda.is_available()
    shapes = SHAPES if len(sys.argv) < 3 else [
        tuple(int(v) for v in item.split("x")) for item in sys.argv[2].split(",")]
    for N, K in [(40, 24)] if smoke else shapes:
        r = ditron.launch(case, 2, N, K, early, backend="cpu" if smoke else "cuda")[0]
        res[f"{N}x{K}"] = r
        for mode, t in r.items():
            tg = t["gemm"]
            print(f"{N}x{K} {mode:5s} " + "  ".join(
                f"{k} {v:.1f}" + (f" ({tg / v:.3f})" if k != "gemm" else "")
                for k, v in t.items()), flush=True)
    with open(f"{out}/rs_early_lab.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
