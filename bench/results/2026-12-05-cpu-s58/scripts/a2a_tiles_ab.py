"""s58 (prepared): the device all-to-all's copy tiles for rows narrower than 256 elements,
8192 elements a tile ("before"; ptxas, sm_90a: 192-476 B of spills per thread) against
4096 ("now", ``a2a_device.NARROW_TILE_ELEMENTS``; none), bf16, on one GPU at world size 1
(the finishing kernel copies every row: own rows skip the inbox). Plain calls, and calls
with send / receive indices and row scales; rows of 256 take 8192-element tiles in both
variants (a control). Eager calls timed with CUDA events, 30 calls
per sample after 5 warm-up calls, 9 rounds in turns, medians, microseconds per call;
outputs of both variants compared first.

    python bench/results/2026-12-05-cpu-s58/scripts/a2a_tiles_ab.py [cpu]  # cpu: a dry run
"""

from __future__ import annotations

import statistics

import torch

import ditron
from ditron.tune.tuner import time_calls

ROWS = 65536
WIDTHS = (8, 24, 64, 100, 128, 256)
VARIANTS = {"before": 8192, "now": 4096}


def _case(rows: int, row: int, indexed: bool) -> str:
    from ditron.ops import a2a_device

    dev = ditron.world().device
    x = torch.randn(rows, row, device=dev, dtype=torch.bfloat16)
    splits = torch.tensor([rows], device=dev)
    kw = {}
    if indexed:
        index = torch.randperm(rows, device=dev)
        kw = {"send_index": index, "recv_index": index,
              "send_scale": torch.rand(rows, device=dev)}

    def call():
        return ditron.ops.all_to_all_device(x, splits, rows, **kw)[0]

    outs, fns = {}, {}
    for name, cap in VARIANTS.items():
        a2a_device.NARROW_TILE_ELEMENTS = cap
        outs[name] = call().clone()
        fns[name] = call
    assert torch.equal(outs["before"], outs["now"]), (row, indexed)
    times = {n: [] for n in VARIANTS}
    for _ in range(9):
        for name, cap in VARIANTS.items():
            a2a_device.NARROW_TILE_ELEMENTS = cap
            times[name] += time_calls(fns[name], 5, 1, x.device, batch=30)
    us = {n: statistics.median(t) for n, t in times.items()}
    a2a_device.NARROW_TILE_ELEMENTS = VARIANTS["now"]
    return (f"{row} | {'yes' if indexed else 'no'} | {us['before']:.1f} | {us['now']:.1f} | "
            f"{us['now'] / us['before']:.3f}")


def main(rows: int = ROWS, widths: tuple[int, ...] = WIDTHS) -> list[str]:
    lines = ["row (bf16 elements) | indexed + scaled | before us | now us | now/before"]
    for row in widths:
        for indexed in (False, True):
            lines.append(_case(rows, row, indexed))
            print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    import sys

    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu": a dry run
    sizes = (40, (8, 100, 256)) if backend == "cpu" else (ROWS, WIDTHS)
    print("\n".join(ditron.launch(main, 1, *sizes, backend=backend)[0]))
