"""Device time of the fused collective kernels per dtype at equal bytes (one GPU).

Runs ``ditron.ops.fused_launch.run`` (the kernel behind the SM engine's all-gather,
all-to-all, reduce-scatter and all-reduce on one node) in a world of one rank, so no peer
shares the GPU and only the kernel's own cost per element width shows. Moved dtypes are
timed as the ops move them (``runtime.dtypes.moved_as``) and at their own width
(``same``); summed dtypes as they are. CUDA events around spans of calls queued behind a
sleep kernel (device time, not the host's), fixed warm-up and iterations, medians;
``vs bf16``: the ratio to bf16's time at the same size. Each result is checked (in a world
of one rank every op returns its input). A world of one rank has no
remote traffic: this compares element widths, not the collectives' speed.

    python bench/dtype_cost.py [--sizes 1M,16M,64M] [--ops all_gather,...] [--dtypes bf16,...]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import ditron
from ditron.kernels import fused_collective as kfc
from ditron.ops import fused_launch
from ditron.runtime.dtypes import moved_as, viewed

MOVED = ("bf16", "uint8", "fp8", "bool", "int16", "int32", "int64")
SUMMED = ("bf16", "fp32", "int32", "int64", "fp64", "uint8")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "uint8": torch.uint8,
          "fp8": torch.float8_e4m3fn, "bool": torch.bool, "int16": torch.int16,
          "int32": torch.int32, "int64": torch.int64, "fp64": torch.float64}
MODES = {"all_gather": kfc.ALL_GATHER, "all_to_all": kfc.ALL_TO_ALL,
         "reduce_scatter": kfc.REDUCE_SCATTER, "all_reduce": kfc.ALL_REDUCE}


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _input(nbytes: int, dtype: torch.dtype, device) -> torch.Tensor:
    """``[rows, 64]`` of ``dtype`` holding ``nbytes`` bytes."""
    raw = torch.randint(0, 2, (nbytes // dtype.itemsize // 64, 64), device=device)
    return raw.to(dtype) if dtype != torch.float8_e4m3fn else raw.float().to(dtype)


def _time(flat: torch.Tensor, mode: int, warmup: int, iters: int, calls: int = 10) -> float:
    """Median device microseconds per call: ``iters`` spans of ``calls`` calls, each span
    queued behind a ~1 ms sleep kernel, so the host's launch cost stays out of it."""
    out = torch.empty_like(flat)
    for _ in range(warmup):
        fused_launch.run(flat, mode, out)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        torch.cuda._sleep(2_000_000)
        s.record()
        for _ in range(calls):
            fused_launch.run(flat, mode, out)
        e.record()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), flat.view(torch.uint8)), "wrong result"  # W = 1
    return statistics.median(s.elapsed_time(e) * 1e3 / calls
                             for s, e in zip(starts, ends, strict=True))


def _rank(sizes: list[int], warmup: int, iters: int, ops: list[str],
          dtypes: list[str] | None) -> list[dict]:
    device = ditron.world().device
    rows = []
    for op in ops:
        mode = MODES[op]
        moved = mode in (kfc.ALL_GATHER, kfc.ALL_TO_ALL)
        for nbytes in sizes:
            base = None
            for name in MOVED if moved else SUMMED:
                if dtypes is not None and name not in dtypes:
                    continue
                x = _input(nbytes, DTYPES[name], device)
                for widen in (True, False) if moved else (None,):
                    carrier = (moved_as(x.dtype, tuple(x.shape), widen) if moved
                               else x.dtype)
                    if widen is False and carrier == moved_as(x.dtype, tuple(x.shape)):
                        continue  # the same run as the widened one
                    us = _time(viewed(x, carrier).view(-1), mode, warmup, iters)
                    base = base or us
                    rows.append({"op": op, "bytes": nbytes, "dtype": name,
                                 "as": str(carrier).removeprefix("torch.")
                                 + ("" if widen is not False else " (same)"),
                                 "us": round(us, 2), "vs_bf16": round(us / base, 3)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ops", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    p.add_argument("--dtypes", default=None, help="comma-separated subset (default: all)")
    p.add_argument("--json", default=None, help="write the rows here too")
    args = p.parse_args()
    sizes = [_size(s) for s in args.sizes.split(",")]
    dtypes = args.dtypes.split(",") if args.dtypes else None
    rows = ditron.launch(_rank, 1, sizes, args.warmup, args.iters, args.ops.split(","), dtypes,
                         backend="cuda")[0]
    print(f"{'op':15s} {'bytes':>10s} {'dtype':6s} {'moved as':16s} {'us':>9s} {'vs bf16':>8s}")
    for r in rows:
        print(f"{r['op']:15s} {r['bytes']:>10d} {r['dtype']:6s} {r['as']:16s} {r['us']:>9.2f} "
              f"{r['vs_bf16']:>8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
