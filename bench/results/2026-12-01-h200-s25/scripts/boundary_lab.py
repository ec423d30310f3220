"""What a stream boundary costs between cuBLAS GEMM pieces on one GPU (session 25 lab).

One rank's compute stream of the pulled GEMM-RS at W = 2, 2 chunks: four GEMMs of M/4 rows
(two plain, two addmm), with the signalling between them done several ways. The pulls are
simulated by local device copies on a side stream. Per-call times from CUDA events over a
batch queued behind a sleep (head start: the host is ahead), and the same batch in a graph.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from ditron.runtime import stream_memops as sm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8192,4096,5504")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--graphs", action="store_true")
    args = p.parse_args()
    M, N, K = map(int, args.shape.split(","))
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
    slots = torch.empty(M // 2, N, device=dev, dtype=torch.bfloat16)  # peer rows' partials
    pulled = torch.empty(M // 2, N, device=dev, dtype=torch.bfloat16)  # "pulled" partials
    whole = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    flags = torch.zeros(64, device=dev, dtype=torch.int64)
    addr = flags.data_ptr()
    q = M // 4
    side = torch.cuda.Stream()
    lane = torch.cuda.Stream()
    ev = [sm.new_event() for _ in range(8)]
    count = [0]

    def raw(s=None):
        return (s or torch.cuda.current_stream()).cuda_stream

    def whole_gemm():
        torch.matmul(a, b, out=whole)

    def make(publish: str, wait: str):
        def call():
            count[0] += 1
            v = count[0]
            comp = raw()
            for i in range(2):  # the peer's rows, two chunks
                torch.matmul(a[i * q:(i + 1) * q], b, out=slots[i * q:(i + 1) * q])
                if publish == "record":
                    sm.record_event(ev[i], comp)
                elif publish == "wv":
                    sm.write_value(comp, addr + 8 * i, v)
                elif publish == "lane":
                    sm.record_event(ev[i], comp)
                    sm.wait_event(raw(lane), ev[i])
                    sm.write_value(raw(lane), addr + 8 * i, v)
                elif publish == "lane_copy":
                    sm.record_event(ev[i], comp)
                    sm.wait_event(raw(lane), ev[i])
                    sm.memcpy(raw(lane), addr + 8 * i, addr + 8 * (32 + i), 8)
            if wait == "none":
                for i in range(2):
                    pulled_i = pulled[i * q:(i + 1) * q]
                    pulled_i.addmm_(a[(2 + i) * q:(3 + i) * q], b)
                if publish.startswith("lane"):
                    sm.record_event(ev[7], raw(lane))
                    sm.wait_event(comp, ev[7])
                return
            for i in range(2):  # the pulls, on the side stream
                if publish in ("wv", "lane"):
                    sm.wait_value(raw(side), addr + 8 * i, v)
                else:
                    sm.record_event(ev[2 + i], comp) if publish == "none" else None
                    sm.wait_event(raw(side), ev[i] if publish != "none" else ev[2 + i])
                sm.memcpy(raw(side), pulled[i * q:].data_ptr(), slots[i * q:].data_ptr(),
                          q * N * 2)
                if wait == "event":
                    sm.record_event(ev[4 + i], raw(side))
                elif wait == "value":
                    sm.write_value(raw(side), addr + 8 * (8 + i), v)
            for i in range(2):
                if wait == "event":
                    sm.wait_event(comp, ev[4 + i])
                elif wait == "value":
                    sm.wait_value(comp, addr + 8 * (8 + i), v)
                pulled[i * q:(i + 1) * q].addmm_(a[(2 + i) * q:(3 + i) * q], b)
            sm.record_event(ev[6], raw(side))
            sm.wait_event(comp, ev[6])
            if publish.startswith("lane"):
                sm.record_event(ev[7], raw(lane))
                sm.wait_event(comp, ev[7])
        return call

    variants = {
        "whole": whole_gemm,
        "pieces": make("none_nowait", "none"),
        "pieces+record": make("record", "none"),
        "pieces+wv": make("wv", "none"),
        "pieces+lane": make("lane", "none"),
        "pieces+lane_copy": make("lane_copy", "none"),
        "pull:event,publish:none": make("none", "event"),
        "pull:event,publish:wv (today eager)": make("wv", "event"),
        "pull:event,publish:lane": make("lane", "event"),
        "pull:value,publish:wv": make("wv", "value"),
        "pull:value,publish:lane": make("lane", "value"),
    }

    def timed(fn, graph=None):
        torch.cuda.synchronize()
        torch.cuda._sleep(40_000_000)  # ~20 ms head start
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(args.batch):
                fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) * 1e3 / args.batch

    for fn in variants.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    names = list(variants)
    eager = {n: [] for n in variants}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            eager[n].append(timed(variants[n]))
    base = statistics.median(eager["pieces"])
    print(f"shape M,N,K = {M},{N},{K}; us per call, median of {args.rounds} batches of "
          f"{args.batch} (head start), eager", flush=True)
    for n in names:
        e = statistics.median(eager[n])
        print(f"{n:42s} {e:8.1f} {e - base:+9.1f}", flush=True)
    if not args.graphs:
        return
    graphs = {}
    for name, fn in variants.items():
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(s):
                fn()
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                for _ in range(args.batch):
                    fn()
            graphs[name] = g
        except Exception as exc:  # noqa: BLE001
            print(f"graph {name}: {type(exc).__name__}: {exc}"[:200])
            torch.cuda.synchronize()
    graph = {n: [] for n in graphs}
    gnames = list(graphs)
    for r in range(args.rounds):
        for n in gnames[r % len(gnames):] + gnames[:r % len(gnames)]:
            graph[n].append(timed(None, graphs[n]))
    gbase = statistics.median(graph["pieces"]) if "pieces" in graph else float("nan")
    print("under graphs (one graph of the batch)")
    for n in gnames:
        g = statistics.median(graph[n])
        print(f"{n:42s} {g:8.1f} {g - gbase:+9.1f}", flush=True)


if __name__ == "__main__":
    main()
