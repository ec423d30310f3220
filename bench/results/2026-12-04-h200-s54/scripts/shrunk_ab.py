"""s54a: the gather kernels' tiles that session 53 shrank without timing them (fp32 rows,
rows whose loads do not vectorize, more than 8 copies) against ``--old REV``'s tiles
(cd26679: before the shrink) and a few others, on one GPU. Two sources as in the combine;
outputs checked against torch; CUDA graphs of 20 calls, 9 rounds, medians (``gather_ab``)."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess

import torch

import ditron.kernels.gather_sum as tree

HERE = pathlib.Path(__file__).resolve().parents[2] / "2026-12-04-h200-s53" / "scripts"
spec = importlib.util.spec_from_file_location("gather_ab", HERE / "gather_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)

# (T, k, N, dtype): N = 7000 and 2040 give row strides not divisible by 16 elements
CASES = [
    (1024, 8, 7168, torch.float32), (8192, 8, 7168, torch.float32),
    (8192, 6, 2048, torch.float32), (8192, 2, 4096, torch.float32),
    (1024, 8, 7000, torch.bfloat16), (8192, 8, 7000, torch.bfloat16),
    (8192, 6, 2040, torch.bfloat16), (8192, 8, 7000, torch.float32),
    (4096, 16, 2048, torch.bfloat16), (1024, 20, 7168, torch.bfloat16),
    (1024, 32, 4096, torch.bfloat16), (4096, 16, 2040, torch.bfloat16),
]
OTHERS = [(8, 256), (8, 128), (8, 64), (8, 32), (4, 128), (4, 64), (16, 64), (16, 32)]


def _inputs(T: int, k: int, N: int, dtype: torch.dtype):
    n = T * k
    src = torch.randn(n, N, device="cuda", dtype=dtype)
    src2 = torch.randn(n, N, device="cuda", dtype=dtype)
    first = torch.rand(T, k, device="cuda") < 0.5
    idx = torch.where(first, torch.randperm(n, device="cuda").view(T, k), -1)
    idx2 = torch.where(first, -1, torch.randperm(n, device="cuda").view(T, k))
    w = torch.rand(T, k, device="cuda")
    g = torch.randn(T, N, device="cuda", dtype=dtype)
    return src, idx, src2, idx2, w, g


def _chosen(kern: str, src: torch.Tensor, N: int, k: int) -> tuple[int, int]:
    aligned = tree._vectorizes((src, src.stride(0)))
    if kern == "sum":
        return tree._blocks(tree.SUM_TILE // (1 if aligned else 2), N, k, 256)
    tile = tree.DOT_TILE // max(1, src.element_size() // 2) // (1 if aligned else 4)
    return tree._blocks(tile, N, k, 128)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="cd26679")
    args = p.parse_args()
    text = subprocess.run(["git", "show", f"{args.old}:ditron/kernels/gather_sum.py"],
                          check=True, capture_output=True, text=True).stdout
    old = ab._variant("gather_old", text.replace("from ..runtime", "from ditron.runtime"))
    default = tree._blocks
    print("kernel T k N dtype | tree tile | old us | tree us | tree/old | best other (us)")
    for T, k, N, dtype in CASES:
        inputs = _inputs(T, k, N, dtype)
        src, idx, src2, idx2, w, g = inputs
        rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)].float(),
                           src2[idx2.clamp(min=0)].float())
        refs = {"sum": (rows * w[..., None]).sum(1), "dot": (rows * g.float()[:, None]).sum(-1)}
        for kern, call in ab._calls(*inputs).items():
            chosen = _chosen(kern, src, N, k)
            fns = {"old": lambda c=call: c(old), "tree": lambda c=call: c(tree)}
            for cfg in OTHERS:
                if cfg != chosen and cfg[1] <= max(16, 1 << (N - 1).bit_length()):

                    def run(c=call, cfg=cfg):
                        tree._blocks = lambda tile, n, kk, widest: cfg
                        try:
                            return c(tree)
                        finally:
                            tree._blocks = default

                    fns[f"{cfg[0]}x{cfg[1]}"] = run
            for name, fn in fns.items():
                err = (fn().float() - refs[kern]).abs().max() / refs[kern].abs().max()
                assert err < 2e-2, (kern, name, float(err))
            us = ab.timed(fns)
            others = {n: t for n, t in us.items() if n not in ("old", "tree")}
            best = min(others, key=others.get)
            print(f"{kern} {T} {k} {N} {str(dtype)[6:]} | {chosen[0]}x{chosen[1]} | "
                  f"{us['old']:.1f} | {us['tree']:.1f} | {us['tree'] / us['old']:.3f} | "
                  f"{best} {others[best]:.1f}", flush=True)
            print("   " + " ".join(f"{n}={t:.1f}" for n, t in us.items()), flush=True)


if __name__ == "__main__":
    main()
