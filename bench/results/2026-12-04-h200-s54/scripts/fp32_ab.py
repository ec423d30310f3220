"""s54 (prepared): session 54's fp32 tiles against the ones before, on one GPU. Before: the
persistent GEMM at 128 x 256 x 32 and every fp32 kernel loading a transposed operand through
TMA (ptxas, sm_90a: 8-22 KB of spills per thread); now: 128 x 128 x 32 and pointer loads
for transposed fp32 operands (no spills). ``torch.matmul`` in full fp32 (no TF32) in the
same run; b = w.t() as a linear layer's. CUDA graphs of 20 calls, 9 rounds in turns,
medians (``gather_ab.timed``), microseconds per call."""

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

OLD_GEMM = gemm.GemmConfig(block_k=32, flatten=True, tma_store=False)  # 128 x 256 x 32
GEMMS = [(8192, 1376, 4096), (8192, 3584, 8192), (8192, 4096, 1376), (2048, 4096, 4096)]
GROUPED = [(8192 * 8 // 64, 64, 2048, 7168)]  # rows per expert, experts, N, K


def _old_rule(run):
    """``run()`` with 32-bit operands allowed on transposed TMA tiles (the rule before)."""
    saved = gemm.transposable, gg.transposable
    gemm.transposable = gg.transposable = lambda dtype: True
    try:
        return run()
    finally:
        gemm.transposable, gg.transposable = saved


def _gemm(M: int, N: int, K: int):
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(N, K, device="cuda").t()
    cfg = gemm.default_config(a.device, a.dtype)
    return a @ b, {"torch": lambda: a @ b,
                   "before": lambda: _old_rule(lambda: gemm.matmul(a, b, OLD_GEMM)),
                   "now": lambda: gemm.matmul(a, b, cfg)}


def _grouped(rows: int, G: int, N: int, K: int, wgrad: bool):
    x = torch.randn(rows * G, K, device="cuda")
    offsets = torch.arange(G + 1, device="cuda") * rows
    xs = x.view(G, rows, K)
    if wgrad:
        dy = torch.randn(rows * G, N, device="cuda")
        ys = dy.view(G, rows, N)
        return torch.bmm(xs.transpose(1, 2), ys), {
            "torch": lambda: torch.bmm(xs.transpose(1, 2), ys),
            "before": lambda: _old_rule(lambda: gg.grouped_gemm_wgrad(x, dy, offsets)),
            "now": lambda: gg.grouped_gemm_wgrad(x, dy, offsets)}
    w = torch.randn(G, N, K, device="cuda").transpose(1, 2)
    return torch.bmm(xs, w).view(-1, N), {
        "torch": lambda: torch.bmm(xs, w),
        "before": lambda: _old_rule(lambda: gg.grouped_gemm(x, w, offsets)),
        "now": lambda: gg.grouped_gemm(x, w, offsets)}


def _row(label: str, ref: torch.Tensor, fns: dict) -> None:
    for name in ("before", "now"):
        got = fns[name]().view(ref.shape)
        err = float((got.double() - ref.double()).abs().max() / ref.double().abs().max())
        assert err < 1e-4, (label, name, err)
    us = ab.timed(fns)
    print(f"{label} | {us['torch']:.1f} | {us['before']:.1f} | {us['now']:.1f} | "
          f"{us['now'] / us['before']:.3f} | {us['now'] / us['torch']:.3f}", flush=True)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    print("kernel shape | torch us | before us | now us | now/before | now/torch")
    for M, N, K in GEMMS:
        _row(f"gemm {M}x{N}x{K}", *_gemm(M, N, K))
    for rows, G, N, K in GROUPED:
        _row(f"grouped {G}x{rows}x{N}x{K}", *_grouped(rows, G, N, K, False))
        _row(f"wgrad {G}x{rows}x{N}x{K}", *_grouped(rows, G, N, K, True))


if __name__ == "__main__":
    main()
