"""Host-side costs measurable without a GPU (CPU backend, 2 ranks), microseconds per call:

* ``fused all_gather glue``: ``ops.all_gather(engine="sm")`` with the kernel launch and the
  wait check replaced by no-ops, i.e. the Python of the op alone;
* ``agree, all_gather_object`` vs ``agree (host rows)``: a check that ranks agree on a
  call's fields, the old way (pickled fields in ``all_gather_object``) and the current one
  (``runtime/host_rows.py``: one int64 row per rank, fields only where they differ);
* ``raise_together, no problem``, ``split gather``: the same rows for a per-call check of
  each rank's own data and for ``all_to_all``'s split sizes;
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
    import torch.distributed as dist

    import ditron.kernels.fused_collective as kfc
    import ditron.ops.collectives as col
    import ditron.ops.fused_launch as fused_launch
    from ditron.runtime import agreement
    from ditron.runtime.world import current

    w = ditron.world().world_size
    rows = {}
    fields = {"row_shape": (4,), "dtype": torch.float32, "engine": "auto"}
    splits = [6] * w
    group = current().host_group

    def objects() -> None:
        every: list = [None] * w
        dist.all_gather_object(every, ("op", tuple(fields), tuple(fields.values())),
                               group=group)

    rows["agree, all_gather_object"] = _per_call(objects, calls)
    rows["agree (host rows)"] = _per_call(
        lambda: agreement.agree("op", remember=False, **fields), calls)
    rows["raise_together, no problem"] = _per_call(
        lambda: agreement.raise_together("check", None), calls)
    rows["split gather"] = _per_call(
        lambda: col._gather_splits("all_to_all", fields, splits, splits, col._EVEN), calls)
    x = torch.randn(6 * w, 4)
    rows["all_to_all (explicit splits)"] = _per_call(
        lambda: ditron.ops.all_to_all(x, splits, splits), max(calls // 10, 10))
    launch, check = kfc.launch, fused_launch.check_waits
    kfc.launch = fused_launch.check_waits = lambda *a, **k: None
    try:
        y = torch.randn(4096)
        rows["fused all_gather glue"] = _per_call(
            lambda: ditron.ops.all_gather(y, engine="sm"), calls)
    finally:
        kfc.launch, fused_launch.check_waits = launch, check
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
