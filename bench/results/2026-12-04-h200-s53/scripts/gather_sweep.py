"""s53b: the gather kernels with every copy of a token block loaded at once
(``[BLOCK_T, KB, BLOCK_N]`` tiles, this tree) at several ``(BLOCK_T, BLOCK_N, num_warps)``
against session 52's (``--old REV``: the copy loop unrolled, and as a runtime loop), on one
GPU; inputs, checks and timing as ``gather_ab.py`` (s53a)."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess

import torch

import ditron.kernels.gather_sum as tree

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("gather_ab", HERE / "gather_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)

CONFIGS = {
    "sum": [(8, 128, 4), (8, 64, 4), (8, 256, 4), (16, 128, 4), (4, 256, 4), (8, 256, 8),
            (16, 64, 4)],
    "dot": [(8, 128, 4), (8, 64, 4), (8, 128, 8), (16, 64, 4), (4, 128, 4), (4, 64, 4),
            (8, 64, 2)],
}
CASES = [(128, 8, 7168), (1024, 8, 7168), (8192, 8, 7168), (8192, 6, 2048), (8192, 2, 4096),
         (4096, 4, 2048)]


def _name(cfg: tuple[int, int, int]) -> str:
    return f"{cfg[0]}x{cfg[1]} w{cfg[2]}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="c28433d")
    args = p.parse_args()
    text = subprocess.run(["git", "show", f"{args.old}:ditron/kernels/gather_sum.py"],
                          check=True, capture_output=True, text=True).stdout
    text = text.replace("from ..runtime", "from ditron.runtime")
    old = ab._variant("gather_old", text)
    loop = ab._variant("gather_old_loop", text.replace(ab.UNROLLED, "for j in range(K):"))
    default = tree._blocks
    for T, k, N in CASES:
        args = ab._inputs(T, k, N)
        src, idx, src2, idx2, w, g = args
        rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)].float(),
                           src2[idx2.clamp(min=0)].float())
        refs = {"sum": (rows * w[..., None]).sum(1), "dot": (rows * g.float()[:, None]).sum(-1)}
        for kern, call in ab._calls(*args).items():
            fns = {"old": lambda c=call: c(old), "old_loop": lambda c=call: c(loop),
                   "default": lambda c=call: c(tree)}
            for cfg in CONFIGS[kern]:

                def run(c=call, cfg=cfg):
                    tree._blocks = lambda device, n, kk: cfg
                    try:
                        return c(tree)
                    finally:
                        tree._blocks = default

                fns[_name(cfg)] = run
            for n, f in fns.items():
                o = f()
                err = (o.float() - refs[kern]).abs().max() / refs[kern].abs().max()
                assert err < 2e-2, (kern, n, float(err))
            us = ab.timed(fns)
            base = us["old"]
            cfg = _name(default(src.device, N, k))
            print(f"{kern} T={T} k={k} N={N} (default {cfg}): " + ", ".join(
                f"{n} {t:.1f} ({t / base:.3f})" for n, t in us.items()), flush=True)


if __name__ == "__main__":
    main()
