"""Host-side costs measurable without a GPU (CPU backend, 2 ranks), microseconds per call:

* ``fused all_gather glue``: ``ops.all_gather(engine="sm")`` with the kernel launch and the
  wait check replaced by no-ops, i.e. the Python of the op alone;
* ``split gather, all_gather_object`` vs ``split gather, int64 all_gather``: the host
  exchange of ``all_to_all``'s split sizes, the old way and the current one;
* ``all_to_all (explicit splits)``: whole calls on the CPU backend.

    python bench/host_cost_cpu.py [--calls 300]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import ditron


def _per_call(fn, calls: int) -> float:
    for _ in range(5):
        fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def _run(calls: int) -> dict[str, float]:
    import ditron.kernels.fused_collective as kfc
    import ditron.ops.collectives as col

    w = ditron.world().world_size
    rows = {}
    sig = ((4,), "torch.float32", False)
    splits = [6] * w
    rows["split gather, all_gather_object"] = _per_call(
        lambda: col._gather_objects((sig, splits, splits)), calls)
    rows["split gather, int64 all_gather"] = _per_call(
        lambda: col._gather_splits("all_to_all", sig, splits, splits), calls)
    x = torch.randn(6 * w, 4)
    rows["all_to_all (explicit splits)"] = _per_call(
        lambda: ditron.ops.all_to_all(x, splits, splits), max(calls // 10, 10))
    launch, check = kfc.launch, col.check_waits
    kfc.launch = col.check_waits = lambda *a, **k: None
    try:
        y = torch.randn(4096)
        rows["fused all_gather glue"] = _per_call(
            lambda: ditron.ops.all_gather(y, engine="sm"), calls)
    finally:
        kfc.launch, col.check_waits = launch, check
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args()
    per_rank = ditron.launch(_run, 2, args.calls, backend="cpu")
    for name in per_rank[0]:
        print(f"{name:<36}" + "".join(f"{r[name]:10.1f} us" for r in per_rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
