"""Device time of the collectives per dtype at equal bytes (ranks of one node).

For each op, engine and size, times the op on every dtype of ``--dtypes`` with the same
number of bytes per rank, and prints the median device time per call and its ratio to
the first dtype's (bf16 by default): what moving bool / fp8 / int data through a carrier
view, or summing integers and fp64 in their own type, costs against the float path.
Every rank runs the same fixed warm-up and iteration counts (CUDA events, medians).

    python bench/dtype_cost.py [--world-size 2] [--sizes 1M,16M] [--engines sm,copy_engine]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import ditron

MOVED = ("bf16", "uint8", "fp8", "bool", "int16", "int64")
SUMMED = ("bf16", "fp32", "int32", "int64", "fp64", "uint8")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "uint8": torch.uint8,
          "fp8": torch.float8_e4m3fn, "bool": torch.bool, "int16": torch.int16,
          "int32": torch.int32, "int64": torch.int64, "fp64": torch.float64}


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _input(nbytes: int, dtype: torch.dtype, rows: int, device) -> torch.Tensor:
    n = nbytes // dtype.itemsize
    raw = torch.randint(0, 2, (rows, n // rows), device=device)
    return raw.to(dtype) if dtype != torch.float8_e4m3fn else raw.float().to(dtype)


def _time(fn, x: torch.Tensor, engine: str, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn(x, engine)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends, strict=True):
        ditron.barrier()
        s.record()
        fn(x, engine)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True))


def _rank(sizes: list[int], engines: list[str], warmup: int, iters: int) -> list[dict]:
    w = ditron.world()
    rows = []
    ops = {"all_gather": (MOVED, lambda x, e: ditron.ops.all_gather(x, engine=e)),
           "all_to_all": (MOVED, lambda x, e: ditron.ops.all_to_all(x, engine=e)),
           "reduce_scatter": (SUMMED, lambda x, e: ditron.ops.reduce_scatter(x, engine=e)),
           "all_reduce": (SUMMED, lambda x, e: ditron.ops.all_reduce(x, engine=e))}
    for op, (names, call) in ops.items():
        for engine in engines:
            for nbytes in sizes:
                base = None
                for name in names:
                    x = _input(nbytes, DTYPES[name], 8 * w.world_size, w.device)
                    us = _time(call, x, engine, warmup, iters)
                    base = base or us
                    rows.append({"op": op, "engine": engine, "bytes": nbytes, "dtype": name,
                                 "us": round(us, 1), "vs_first": round(us / base, 3)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--sizes", default="1M,16M")
    p.add_argument("--engines", default="sm,copy_engine")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json", default=None, help="write the rows here too")
    args = p.parse_args()
    sizes = [_size(s) for s in args.sizes.split(",")]
    rows = ditron.launch(_rank, args.world_size, sizes, args.engines.split(","), args.warmup,
                         args.iters, backend="cuda")[0]
    print(f"{'op':15s} {'engine':12s} {'bytes':>10s} {'dtype':6s} {'us':>9s} {'vs first':>8s}")
    for r in rows:
        print(f"{r['op']:15s} {r['engine']:12s} {r['bytes']:>10d} {r['dtype']:6s} "
              f"{r['us']:>9.1f} {r['vs_first']:>8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
