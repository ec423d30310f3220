"""Does a pull's wait start beside cuBLAS's GEMM pieces? (session 25 lab, one GPU.)

One rank's compute stream of the graph-safe pulled GEMM-RS at W = 2, two chunks: GEMM
pieces P0, P1 (the peer's rows), then O0, O1 (``addmm`` onto the pulled rows). The pull of
chunk 0 is simulated on the copy engine's side stream: it waits for P0's signal, then
copies a buffer sized to take about as long as the real pull over NVLink (~50 us), and O0
waits for it. The wait is either the graph path's spinning kernel on a device epoch
(``wait_one`` with a DeviceValue; queued after a mark taken after P0, as ``_rs_pulled``
does) or a stream wait on a flag that the pull clears (``PULL_FLAGS``). Per-call time of
a CUDA graph of 5 calls, and eagerly with a head start, against the pieces alone.
"""
from __future__ import annotations

import argparse
import statistics

import torch

import ditron
from ditron.engines.copy_engine import side_stream
from ditron.engines.streams import mark_current, start_after
from ditron.engines.sync import bump, notify_one, wait_one
from ditron.runtime import stream_memops as smo
from ditron.runtime.signals import signal_pad


def case(shape: str, copy_mb: int, batch: int, rounds: int) -> list[str]:
    M, N, K = map(int, shape.split(","))
    dev = torch.device("cuda")
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()
    q = M // 4
    slots = torch.empty(2 * q, N, device=dev, dtype=torch.bfloat16)
    out = torch.zeros(2 * q, N, device=dev, dtype=torch.bfloat16)
    src = torch.empty(copy_mb << 19, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    pad = signal_pad("coop_wait_lab", 8)
    side = side_stream(dev, 0)
    flag = pad.address(0) + 8 * 4  # slot 4: the flag

    def call(mode: str) -> None:
        comp = torch.cuda.current_stream()
        e = bump(pad) if mode == "spin" else None
        if mode != "none":
            start_after(side, None)
        for i in range(2):
            torch.matmul(a[i * q:(i + 1) * q], b, out=slots[i * q:(i + 1) * q])
            if mode == "none":
                continue
            if i == 0:
                if mode == "spin":
                    notify_one(pad, 0, e, 0)  # slot 0 := E (a kernel)
                    mark = mark_current()
                    smo.wait_event(side.cuda_stream, mark)
                    with torch.cuda.stream(side):
                        wait_one(pad, 0, e)  # spins on an SM until slot 0 >= E
                else:
                    smo.write_value(comp.cuda_stream, flag, 1)
                    smo.wait_value(side.cuda_stream, flag, 1)
                    smo.write_value(side.cuda_stream, flag, 0)
                with torch.cuda.stream(side):
                    dst.copy_(src, non_blocking=True)
        if mode != "none":
            comp.wait_stream(side)
        for i in range(2):
            out[i * q:(i + 1) * q].addmm_(a[(2 + i) * q:(3 + i) * q], b)

    modes = ["none", "spin", "flag"]
    for m in modes:
        call(m)
    torch.cuda.synchronize()
    graphs = {}
    for m in modes:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(batch):
                call(m)
        graphs[m] = g
    torch.cuda.synchronize()

    def timed(fn) -> float:
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        t.record()
        t.synchronize()
        return s.elapsed_time(t) * 1e3 / batch

    res = {(m, k): [] for m in modes for k in ("graph", "eager")}
    for r in range(rounds):
        for m in modes[r % 3:] + modes[:r % 3]:
            res[m, "graph"].append(timed(graphs[m].replay))
            res[m, "eager"].append(timed(lambda m=m: [call(m) for _ in range(batch)]))
    cp = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cp[0].record()
    dst.copy_(src)
    cp[1].record()
    cp[1].synchronize()
    lines = [f"M,N,K = {shape}: four pieces of {q} rows; the simulated pull copies "
             f"{copy_mb} MB locally in {cp[0].elapsed_time(cp[1]) * 1e3:.1f} us alone; "
             f"us per call, median of {rounds}"]
    for m in modes:
        g = statistics.median(res[m, "graph"])
        e = statistics.median(res[m, "eager"])
        lines.append(f"  {m:5s} graph {g:8.1f}   eager (head start) {e:8.1f}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8192,4608,18432;8192,4096,5504")
    p.add_argument("--copy-mb", type=int, default=150)
    p.add_argument("--batch", type=int, default=5)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    for shape in args.shapes.split(";"):
        for line in ditron.launch(case, 1, shape, args.copy_mb, args.batch, args.rounds,
                                  backend="cuda")[0]:
            print(line, flush=True)


if __name__ == "__main__":
    main()
