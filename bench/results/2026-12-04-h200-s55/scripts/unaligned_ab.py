"""s55 (prepared): session 55's tiles for operands whose pointer loads cannot be vectorized
against the GPU defaults before, on one GPU, bf16. Before: the persistent GEMM at 128 x 256
x 64 and the grouped GEMM at 128 x 256 x 64 / 64 x 128 x 64 (ptxas, sm_90a: 0.9-3 KB of
spills per thread on these operands); now: ``default_config(..., operands)``, 128 x 128 x
32 and 64 x 128 x 32 with 8 warps (no spills). ``torch.matmul`` / ``torch.bmm`` in the same
run. CUDA graphs of 20 calls, 9 rounds in turns, medians (``gather_ab.timed``),
microseconds per call."""

from __future__ import annotations

import importlib.util
import pathlib

import torch

from ditron.kernels import gemm
from ditron.kernels import grouped_gemm as gg

HERE = pathlib.Path(__file__).resolve().parents[2] / "2026-12-04-h200-s53" / "scripts"
spec = importlib.util.spec_from_file_location("gather_ab", HERE / "gather_ab.py")
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)

BF16 = torch.bfloat16
#: (M, N, K, b layout): a vocabulary head with a row-major [K, N] weight (N = 50257: no TMA
#: on b), and K = 4100 (rows of 8200 bytes: no TMA on either operand)
GEMMS = [(8192, 50257, 4096, "kn"), (8192, 4096, 4100, "nk"), (2048, 14336, 4100, "nk")]
#: (rows per expert, experts, N, K): K = 7172 (no TMA), many rows and decoding's few
GROUPED = [(1024, 8, 2048, 7172), (16, 64, 2048, 7172)]


def _gemm(M: int, N: int, K: int, layout: str):
    a = torch.randn(M, K, device="cuda", dtype=BF16)
    b = (torch.randn(K, N, device="cuda", dtype=BF16) if layout == "kn"
         else torch.randn(N, K, device="cuda", dtype=BF16).t())
    now = gemm.default_config(a.device, a.dtype, (a, b))
    assert now != gemm.GPU_CONFIG, "these operands should take the smaller tiles"
    return a @ b, {"torch": lambda: a @ b,
                   "before": lambda: gemm.matmul(a, b, gemm.GPU_CONFIG),
                   "now": lambda: gemm.matmul(a, b, now)}


def _grouped(rows: int, G: int, N: int, K: int):
    x = torch.randn(rows * G, K, device="cuda", dtype=BF16)
    offsets = torch.arange(G + 1, device="cuda") * rows
    w = torch.randn(G, N, K, device="cuda", dtype=BF16).transpose(1, 2)
    xs = x.view(G, rows, K)
    old = gg.default_config(x.device, x.dtype, rows)
    now = gg.default_config(x.device, x.dtype, rows, (x, w))
    assert now != old, "these operands should take the smaller tiles"
    return torch.bmm(xs, w).view(-1, N), {
        "torch": lambda: torch.bmm(xs, w),
        "before": lambda: gg.grouped_gemm(x, w, offsets, config=old),
        "now": lambda: gg.grouped_gemm(x, w, offsets, config=now)}


def _row(label: str, ref: torch.Tensor, fns: dict) -> None:
    for name in ("before", "now"):
        got = fns[name]().view(ref.shape)
        err = float((got.double() - ref.double()).abs().max() / ref.double().abs().max())
        assert err < 2e-2, (label, name, err)
    us = ab.timed(fns)
    print(f"{label} | {us['torch']:.1f} | {us['before']:.1f} | {us['now']:.1f} | "
          f"{us['now'] / us['before']:.3f} | {us['now'] / us['torch']:.3f}", flush=True)


def main() -> None:
    print("kernel shape | torch us | before us | now us | now/before | now/torch")
    for M, N, K, layout in GEMMS:
        _row(f"gemm {M}x{N}x{K} b {layout}", *_gemm(M, N, K, layout))
    for rows, G, N, K in GROUPED:
        _row(f"grouped {G}x{rows}x{N}x{K}", *_grouped(rows, G, N, K))


if __name__ == "__main__":
    main()
