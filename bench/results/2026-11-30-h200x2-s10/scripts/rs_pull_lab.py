"""Session 10 lab: GEMM-RS by the copy engine, pushes + separate sum (session 9) against
pulls into the result + addmm (this session), eager and under CUDA graphs, 2 ranks.

python3 lab_s10/rs_pull_lab.py (at 07429de) [--shapes NxK,...] [--batch 5] [--iters 12]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.distributed as dist

import ditron


def _candidates(a, b, seg, tpg):
    """The timed calls of one shape (``tpg._RS_PULL``: the lab switch of ``07429de``)."""

    def push(chunk_rows=None):
        tpg._RS_PULL = False
        try:
            return ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine",
                                      chunk_rows=chunk_rows)
        finally:
            tpg._RS_PULL = True

    return {
        "t_gemm": lambda: torch.matmul(a, b),
        "base": lambda: ditron.ops.gemm_rs(a, b, method="fallback"),
        "push1": lambda: push(),
        "push2": lambda: push(seg // 2),
        "pull2": lambda: ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine"),
        "pull4": lambda: ditron.ops.gemm_rs(a, b, method="overlap", engine="copy_engine",
                                            chunk_rows=seg // 4),
    }


def body(shapes, batch, iters, out):
    from ditron.benchmarks.capture import capture

    from ditron.ops import tp_gemm as tpg
    from ditron.tune.tuner import agreed_median, rotations, time_calls

    w = ditron.world()
    W, dev = w.world_size, w.device
    rows = []
    for N, K in shapes:
        M = 8192
        torch.manual_seed(w.rank)
        a = torch.randn(M, K // W, device=dev).to(torch.bfloat16)
        b = torch.randn(N, K // W, device=dev).to(torch.bfloat16).t()
        seg = M // W

        cands = _candidates(a, b, seg, tpg)
        # correctness of the pulled path against the fallback on this shape
        ref = ditron.ops.gemm_rs(a, b, method="fallback").float()
        for name in ("pull2", "pull4", "push1"):
            got = cands[name]().float()
            err = (got - ref).abs().max().item() / ref.abs().max().item()
            if err > 2e-2:
                raise AssertionError(f"{name} {N}x{K}: relative error {err}")
        row = {"N": N, "K": K}
        samples = {n: [] for n in cands}
        for r, order in enumerate(rotations(list(cands), 3)):
            for n in order:
                samples[n] += time_calls(cands[n], 3 if r == 0 else 1, max(2, iters // 6),
                                         dev, batch)
        for n in cands:
            row[n] = agreed_median(samples[n])
        if dev.type != "cuda":
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        graphs = {n: capture(cands[n], batch, graph_safe=n not in ("t_gemm", "base"))
                  for n in cands}
        gs = {n: [] for n in graphs}
        for r, order in enumerate(rotations(list(graphs), 3)):
            for n in order:
                gs[n] += [t / batch for t in time_calls(graphs[n].replay, 2 if r == 0 else 1,
                                                        max(2, iters // 6), dev)]
        for n in graphs:
            row["graph_" + n] = agreed_median(gs[n])
        del graphs
        rows.append(row)
        if w.rank == 0:
            print(json.dumps(row), flush=True)
    if w.rank == 0 and dev.type == "cuda":
        names = list(cands)
        for prefix, title in (("", "eager"), ("graph_", "CUDA graphs")):
            print(f"\n{title}: us per call (eff = T_gemm / T_op)")
            print(f"{'N x K':>12} " + " ".join(f"{n:>8}" for n in names)
                  + " " + " ".join(f"{'eff_' + n:>10}" for n in names[2:]))
            for r in rows:
                tg = r[prefix + "t_gemm"]
                print(f"{r['N']:>5} x {r['K']:<5} "
                      + " ".join(f"{r[prefix + n]:8.1f}" for n in names) + " "
                      + " ".join(f"{tg / r[prefix + n]:10.3f}" for n in names[2:]))
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)
    dist.barrier()
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x11008,4096x14336,3584x14336,4608x36864,"
                                        "8192x28672,8192x29568")
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--out", default="rs_pull_lab.json")
    p.add_argument("--world-size", type=int, default=2)
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    sys.exit(max(ditron.launch(body, args.world_size, shapes, args.batch, args.iters,
                               args.out)))
