"""s52a, s52b: ``kernels.routing.sort_copies`` at a git revision or in a saved file
(``--old``) against this tree's, on one GPU: same inputs, outputs compared, then CUDA graphs
of 20 calls each replayed in turns over 9 rounds (medians, microseconds per call, warm-up
excluded)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import types

import torch

from ditron.kernels import routing as new


def _old(rev: str) -> types.ModuleType:
    if os.path.exists(rev):  # a saved copy (the device's checkout lacks local commits)
        with open(rev) as f:
            src = f.read()
    else:
        src = subprocess.run(["git", "show", f"{rev}:ditron/kernels/routing.py"], check=True,
                             capture_output=True, text=True).stdout
    src = src.replace("from ..runtime", "from ditron.runtime")
    mod = types.ModuleType("routing_old")
    mod.__file__ = "/tmp/routing_old.py"
    with open(mod.__file__, "w") as f:  # triton.jit reads the source from the file
        f.write(src)
    import importlib.util

    spec = importlib.util.spec_from_file_location("routing_old", mod.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _graph(fn, calls=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="HEAD")
    args = p.parse_args()
    old = _old(args.old)
    print("tokens k experts W | old us | new us | new/old")
    for T, k, E, W in [(128, 8, 64, 8), (8192, 8, 64, 8), (8192, 8, 256, 8),
                       (128, 8, 256, 8), (32768, 8, 64, 8), (8192, 8, 128, 8)]:
        ids = torch.randint(0, E, (T, k), device="cuda")
        a, b = old.sort_copies(ids, E, W), new.sort_copies(ids, E, W)
        for f in ("order", "token", "counts", "send_splits"):
            assert torch.equal(getattr(a, f), getattr(b, f)), f
        ref = torch.sort(ids.flatten(), stable=True).indices
        assert torch.equal(b.order, ref), "order"
        graphs = {n: _graph(lambda m=m, i=ids, e=E, w=W: m.sort_copies(i, e, w)) for n, m in
                  (("old", old), ("new", new))}
        times = {n: [] for n in graphs}
        for _ in range(9):
            for n, g in graphs.items():
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                e1.synchronize()
                times[n].append(e0.elapsed_time(e1) * 1000 / 20)
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{T} {k} {E} {W} | {o:.1f} | {n:.1f} | {n / o:.3f}")


if __name__ == "__main__":
    main()
