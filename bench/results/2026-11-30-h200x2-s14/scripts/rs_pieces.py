"""Session 14 lab (one H200): one rank's GEMM-RS compute for W = 2 as launches of the
persistent GEMM over ranges of the scatter order, EPILOGUE 3 (peer tiles into the inbox
slot, own tiles add the pulled partial), against cuBLAS whole and the pulled engine's
cuBLAS pieces (2 mm + 2 addmm). Under CUDA graphs, variants in turns, median.

    python bench/results/2026-11-30-h200x2-s14/scripts/rs_pieces.py [--shapes NxK,...]

Needs scripts/pull_persistent_engine.patch applied (EPILOGUE 3 is not on main).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from gemm_lab import capture  # noqa: E402

from ditron.kernels import gemm as G  # noqa: E402
from ditron.kernels.swizzle import scatter_order  # noqa: E402

SHAPES = "4096x5504,4096x7168,3584x7168,4608x18432,8192x14336,8192x14784"
BASE = G.GemmConfig(flatten=True, tma_store=True)
CONFIGS = {
    "t256": BASE,  # flattened, TMA store and TMA reduction
    "u3pl": dataclasses.replace(BASE, flatten=False, tma_store=False),  # plain stores
}


def graph_rounds(graphs: dict, rounds: int = 15, calls: int = 10) -> dict[str, float]:
    """Per-call us of each graph, median over rounds; each round starts one variant later
    (so no variant always follows the same one: clocks react to the previous one's power)."""
    names = list(graphs)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graphs[name].replay()
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e3 / calls)
    return {n: statistics.median(t) for n, t in times.items()}


def run_shape(N: int, K: int, M: int = 8192) -> list[dict]:
    dev = torch.device("cuda")
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
    ref = a.float() @ b.float()
    half = M // 2
    c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    out = torch.empty(half, N, device=dev, dtype=torch.bfloat16)
    recv = torch.empty(2, half, N, device=dev, dtype=torch.bfloat16)
    addend = torch.randn(half, N, device=dev, dtype=torch.bfloat16)
    P = torch.cuda.get_device_properties(dev).multi_processor_count
    nb = -(-N // 128)

    def cublas_whole():
        torch.matmul(a, b, out=c)

    def pull():  # the pulled engine's GEMMs: peer quarters, then own quarters onto addends
        q = half // 2
        for lo in (half, half + q):
            torch.matmul(a[lo:lo + q], b, out=recv[1, lo - half:lo - half + q])
        for lo in (0, q):
            out[lo:lo + q].addmm_(a[lo:lo + q], b)

    lin = G.cached_linear_order(M, N, BASE, dev)

    def t256_whole():
        G.launch_gemm(a, b, c, M, order=lin, seg_rows=M, cfg=BASE)

    u3pl = CONFIGS["u3pl"]

    def u3pl_whole():
        G.launch_gemm(a, b, c, M, order=lin, seg_rows=M, cfg=u3pl)

    cases = {"cublas whole": (cublas_whole, None), "cublas pull": (pull, "pull"),
             "t256 whole": (t256_whole, None), "u3pl whole epi0": (u3pl_whole, None)}
    bps = half // 128
    seg_of_block = [mb // bps for mb in range(2 * bps)]

    lo_w = torch.tensor([0] * bps + [0] * bps, dtype=torch.int32)
    hi_w = torch.tensor([-1] * bps + [-1] * bps, dtype=torch.int32)
    for mb in range(bps):  # own blocks wait for their half's pulled chunk
        lo_w[mb] = hi_w[mb] = mb * 2 // bps
    sig = torch.ones(64, dtype=torch.int64, device=dev)
    del nb
    for name, cfg in CONFIGS.items():
        order = scatter_order(seg_of_block, -(-N // cfg.block_n), 0, 2, 8).to(dev)
        for split in ("x1", "s2", "s3"):
            cuts = {"x1": [0], "s2": [0, 2 * P], "s3": [0, 2 * P, 4 * P]}[split]
            cuts = [x for x in cuts if x < order.numel()] + [order.numel()]
            for wait in (False,) if split == "x1" else (True,):
                hooks = G.GemmHooks(epilogue=G.EPI_ACCUMULATE, recv=recv)
                if wait:
                    hooks = dataclasses.replace(hooks, wait_lo=lo_w.to(dev),
                                                wait_hi=hi_w.to(dev), wait_sig=sig,
                                                wait_target=1)

                def fn(cfg=cfg, cuts=cuts, hooks=hooks, order=order):
                    for lo, hi in zip(cuts[:-1], cuts[1:], strict=False):
                        G.launch_gemm(a, b, out, M, order=order[lo:hi], seg_rows=half,
                                      cfg=cfg, hooks=hooks)
                cases[f"epi3 {name} {split}{' wait' if wait else ''}"] = (fn, "epi3")
    rows, graphs = [], {}
    for name, (fn, kind) in cases.items():
        try:
            c.fill_(float("nan"))
            recv.fill_(float("nan"))
            out.copy_(addend)
            fn()
            torch.cuda.synchronize()
            if kind is None:
                got, want = c.float(), ref
            else:
                got = torch.cat([out.float() - addend.float(), recv[1].float()])
                want = ref
            err = ((got - want).norm() / want.norm()).item()
            if not err < 1e-2:
                raise AssertionError(f"relative error {err}")
            graphs[name] = capture(fn)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{N}x{K} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        rows.append(dict(M=M, N=N, K=K, variant=name, err=err))
    per_call = graph_rounds(graphs)
    whole = per_call["cublas whole"]
    for r in rows:
        r["graph"] = per_call[r["variant"]]
        r["x_cublas_whole"] = whole / r["graph"]
        print(f"{M}x{N}x{K:<6} {r['variant']:<26} {r['graph']:8.1f} us  "
              f"x cuBLAS whole {r['x_cublas_whole']:.3f}", flush=True)
    del graphs
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    import ditron

    ditron.init("cuda")
    torch.manual_seed(0)
    rows = []
    for s in args.shapes.split(","):
        n, k = (int(x) for x in s.split("x"))
        rows += run_shape(n, k)
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rs_pieces.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
