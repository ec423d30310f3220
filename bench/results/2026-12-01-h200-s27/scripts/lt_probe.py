"""cuBLASLt gemm_add on one GPU: correctness, and its time against torch's GEMMs.

us per call: graphs of 10 back-to-back calls, variants taking turns over rounds, median."""
import json
import sys

import cublaslt_lab as cublaslt  # beside this script
import torch

torch.manual_seed(0)
dev = torch.device("cuda")
print("library:", cublaslt._library_path(), "available:", cublaslt.available(), flush=True)

# --- correctness
worst = {}
for dtype, tol in ((torch.bfloat16, 2e-2), (torch.float16, 5e-3), (torch.float32, 1e-4)):
    for M, N, k, bt, at in ((300, 1000, 77, False, False), (4096, 4096, 5504, True, False),
                            (129, 257, 130, True, True), (1, 64, 16, False, False),
                            (64, 1, 16, True, False)):
        a = torch.randn(k, M, device=dev, dtype=dtype).t() if at else \
            torch.randn(M, k, device=dev, dtype=dtype)
        b = torch.randn(N, k, device=dev, dtype=dtype).t() if bt else \
            torch.randn(k, N, device=dev, dtype=dtype)
        big = torch.randn(M + 3, N, device=dev, dtype=dtype)
        c = big[3:]  # a row offset: alignment below 256 B
        out = torch.full((M, N), float("nan"), device=dev, dtype=dtype)
        cublaslt.gemm_add(a, b, c, out)
        ref = c.double() + a.double() @ b.double()
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        worst[f"{dtype} {M}x{N}x{k} bt={bt} at={at}"] = err
        assert err < tol, (dtype, M, N, k, err)
print("correctness ok; max rel err per case:", json.dumps(worst, indent=1), flush=True)

# --- timing
def graph_of(fn, reps=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g

def timed(graphs, rounds=9, reps=10):
    res = {k: [] for k in graphs}
    for _ in range(rounds):
        for k, g in graphs.items():
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            res[k].append(e0.elapsed_time(e1) * 1000 / reps)
    return {k: sorted(v)[len(v) // 2] for k, v in res.items()}

def run_shape(M, N, K):
    h = M // 2
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
    b = w.t()
    out_full = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    out = torch.empty(h, N, device=dev, dtype=torch.bfloat16)
    c = torch.randn(h, N, device=dev, dtype=torch.bfloat16)
    c_host = torch.randn(h, N, dtype=torch.bfloat16).pin_memory()
    lt_a, lt_b = cublaslt._operand(b), cublaslt._operand(a[:h])

    def host_c():
        cublaslt.launch(a[h:], b, c_host.data_ptr(), out, lt_a, lt_b)

    fns = {
        "whole matmul (M rows)": lambda: torch.matmul(a, b, out=out_full),
        "two halves matmul": lambda: (torch.matmul(a[:h], b, out=out),
                                      torch.matmul(a[h:], b, out=out)),
        "half + half addmm_ (C local, in place)": lambda: (torch.matmul(a[:h], b, out=out),
                                                           out.addmm_(a[h:], b)),
        "half + half gemm_add (C local)": lambda: (torch.matmul(a[:h], b, out=out),
                                                   cublaslt.gemm_add(a[h:], b, c, out)),
        "half + half gemm_add (C pinned host)": lambda: (torch.matmul(a[:h], b, out=out),
                                                         host_c()),
        "half gemm_add (C local) only": lambda: cublaslt.gemm_add(a[h:], b, c, out),
        "half gemm_add (C pinned host) only": host_c,
        "half matmul only": lambda: torch.matmul(a[h:], b, out=out),
    }
    host_c()  # check the host-C path once
    ref = c_host.to(dev).float() + a[h:].float() @ b.float()
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    graphs = {k: graph_of(f) for k, f in fns.items()}
    t = timed(graphs)
    t["host-C rel err"] = err
    return t


results = {}
for M, N, K in ((8192, 4096, 5504), (8192, 4096, 7168), (8192, 3584, 7168), (8192, 4608, 18432)):
    results[f"{M}x{N}x{K}"] = run_shape(M, N, K)
    print(f"{M}x{N}x{K}:", json.dumps(results[f"{M}x{N}x{K}"], indent=1), flush=True)

if len(sys.argv) > 1:
    json.dump(results, open(sys.argv[1], "w"), indent=1)
