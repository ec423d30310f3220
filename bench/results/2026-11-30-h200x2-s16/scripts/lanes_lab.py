"""s16e: the copy engine's all-gather with its pulls on one side stream (PULL_LANES = 1)
against two taking turns chunk by chunk (2), and NCCL, on 2 GPUs: eager batches of 10
calls and CUDA graphs of 10 calls, in rotating rounds with a barrier before each sample;
us per call, the slower rank's median."""
from __future__ import annotations

import json
import os
import statistics

import torch
import torch.distributed as dist

import ditron
from ditron.ops import exchange
from ditron.ops.graphs import capture
from ditron.runtime.world import current
from ditron.tune.tuner import rotations

SIZES = [64 << 20, 96 << 20, 256 << 20, 512 << 20, 1 << 30]
CALLS = 10


def with_lanes(lanes: int, fn):
    def call():
        exchange.PULL_LANES = lanes
        return fn()
    return call


def timed(fns: dict, rounds: int, graph: bool) -> dict:
    samples = {k: [] for k in fns}
    for order in rotations(list(fns), rounds):
        for name in order:
            dist.barrier(group=current().host_group)
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


def case(nbytes: int) -> dict:
    w = ditron.world()
    torch.manual_seed(w.rank)
    x = torch.randn(nbytes // 2 // w.world_size, device=w.device, dtype=torch.bfloat16)
    out = torch.empty(nbytes // 2, device=w.device, dtype=torch.bfloat16)

    def ag():
        return ditron.ops.all_gather(x, engine="copy_engine")

    fns = {"lanes1": with_lanes(1, ag), "lanes2": with_lanes(2, ag),
           "nccl": lambda: dist.all_gather_into_tensor(out, x)}
    dist.all_gather_into_tensor(out, x)
    ref = out.float().clone()
    for name in ("lanes1", "lanes2"):
        for _ in range(2):
            got = fns[name]()
        err = (got.float() - ref).abs().max().item()
        assert err == 0, (name, err)
    eager = timed(fns, 6, graph=False)
    graphs = {k: capture(fn, CALLS, safe_warm_up=k != "nccl") for k, fn in fns.items()}
    return {"eager": eager, "graph": timed(graphs, 6, graph=True)}


def main() -> None:
    out = os.environ.get("OUT", ".") + "/s16e"
    os.makedirs(out, exist_ok=True)
    res = {}
    for nbytes in SIZES:
        r = ditron.launch(case, 2, nbytes, backend="cuda")[0]
        res[str(nbytes)] = r
        for mode, t in r.items():
            print(f"{nbytes >> 20:5d}M {mode:5s} " + "  ".join(
                f"{k} {v:.1f} ({t['nccl'] / v:.2f}x)" for k, v in t.items()), flush=True)
    with open(f"{out}/lanes_lab.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
