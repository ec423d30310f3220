"""GEMM-RS by pulls: chunk signals raised beside the compute stream (``notify_beside``)
against on it (``notify_one``), same run, CUDA graphs of 4 calls and eager batches, timed
in alternating rounds; each variant checked against torch first.

    python lab_s11/rs_beside_lab.py [--shapes 4096x11008,...]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.distributed as dist

import ditron


def _variant(name: str) -> None:
    from ditron.engines import sync
    from ditron.ops import tp_gemm

    if name == "beside":
        tp_gemm.notify_beside, tp_gemm.join_beside = sync.notify_beside, sync.join_beside
    else:
        tp_gemm.notify_beside, tp_gemm.join_beside = sync.notify_one, lambda: None


def _rank(shapes: list[tuple[int, int]], rounds: int) -> list[str]:
    from ditron.ops.graphs import capture
    from ditron.runtime.world import current

    w = ditron.world()
    W, dev = w.world_size, w.device
    group = current().host_group
    lines = []
    for N, K in shapes:
        M = 8192
        torch.manual_seed(w.rank)
        a = torch.randn(M, K // W, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, K // W, device=dev, dtype=torch.bfloat16).t()
        full = (a.float() @ b.float())
        dist.all_reduce(full)
        ref = full[w.rank * (M // W):(w.rank + 1) * (M // W)]
        fn = lambda a=a, b=b: ditron.ops.gemm_rs(a, b, method="overlap",  # noqa: E731
                                                 engine="copy_engine_pull")
        graphs, ok = {}, {}
        for name in ("inline", "beside"):
            _variant(name)
            out = fn()
            torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item() / ref.abs().max().item()
            ok[name] = err < 2e-2
            graphs[name] = capture(fn, 4)
        samples: dict[str, list[float]] = {f"{m} {n}": [] for m in ("graph", "eager")
                                           for n in graphs}
        for r in range(rounds):
            order = list(graphs) if r % 2 == 0 else list(reversed(graphs))
            for name in order:
                dist.barrier(group=group)
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                graphs[name].replay()
                e.record()
                e.synchronize()
                samples[f"graph {name}"].append(s.elapsed_time(e) * 1e3 / 4)
                _variant(name)
                dist.barrier(group=group)
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(4):
                    fn()
                e.record()
                e.synchronize()
                samples[f"eager {name}"].append(s.elapsed_time(e) * 1e3 / 4)
        med = {k: torch.tensor([statistics.median(v)]) for k, v in samples.items()}
        for t in med.values():
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        lines.append(f"{N}x{K}: correct {ok}; " + ", ".join(
            f"{k} {t.item():.1f} us" for k, t in med.items()))
        del graphs
    return lines


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x11008,4096x14336,3584x14336")
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for line in ditron.launch(_rank, 2, shapes, args.rounds, backend="cuda")[0]:
        print(line, flush=True)


if __name__ == "__main__":
    main()
