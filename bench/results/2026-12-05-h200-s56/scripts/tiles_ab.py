"""s56c: the gather kernels' tiles from session 56's timing (gather-sum: 4 x 64 on rows whose
loads do not vectorize, 8 x 128 on vectorized fp32 rows; gather-dot: 4 x 128 on vectorized
16-bit rows of 16 copies or more) against ``--old REV``'s (3bc3ca6), on one GPU, the cases
of session 54's ``shrunk_ab.py``. Outputs checked against torch; CUDA graphs of 20
calls, 9 rounds in turns, medians (``gather_ab.timed``), microseconds per call."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess

import torch

import ditron.kernels.gather_sum as tree

RESULTS = pathlib.Path(__file__).resolve().parents[2]


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ab = _load(RESULTS / "2026-12-04-h200-s53" / "scripts" / "gather_ab.py", "gather_ab")
shrunk = _load(RESULTS / "2026-12-04-h200-s54" / "scripts" / "shrunk_ab.py", "shrunk_ab")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="3bc3ca6")
    args = p.parse_args()
    text = subprocess.run(["git", "show", f"{args.old}:ditron/kernels/gather_sum.py"],
                          check=True, capture_output=True, text=True).stdout
    old = ab._variant("gather_old", text.replace("from ..runtime", "from ditron.runtime"))
    print("kernel T k N dtype | tile now | old us | now us | now/old")
    for T, k, N, dtype in shrunk.CASES:
        src, idx, src2, idx2, w, g = shrunk._inputs(T, k, N, dtype)
        rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)].float(),
                           src2[idx2.clamp(min=0)].float())
        refs = {"sum": (rows * w[..., None]).sum(1), "dot": (rows * g.float()[:, None]).sum(-1)}
        aligned = tree._vectorizes((src, src.stride(0)))
        for kern, call in ab._calls(src, idx, src2, idx2, w, g).items():
            fns = {"old": lambda c=call: c(old), "now": lambda c=call: c(tree)}
            for name, fn in fns.items():
                err = (fn().float() - refs[kern]).abs().max() / refs[kern].abs().max()
                assert err < 2e-2, (kern, name, float(err))
            pick = tree._sum_blocks if kern == "sum" else tree._dot_blocks
            bt, bn = pick(N, k, src.element_size(), aligned)
            us = ab.timed(fns)
            print(f"{kern} {T} {k} {N} {str(dtype)[6:]} | {bt}x{bn} | {us['old']:.1f} | "
                  f"{us['now']:.1f} | {us['now'] / us['old']:.3f}", flush=True)


if __name__ == "__main__":
    main()
