"""s57 (prepared): the fp32 cases of session 54's ``fp32_ab.py`` that session 56 did not reach,
without the tiles before (the one case timed ran 43x slower than now: 0.22 s a call), so
they fit one call: the persistent GEMM, grouped GEMM and weight gradient at their fp32
defaults against torch in full fp32 (no TF32). These numbers check
``tune.cost_model.FP32_SLOWDOWN`` (2.5, from one shape). CUDA graphs of 20 calls, 9 rounds
in turns, medians (``gather_ab.timed``), microseconds per call."""

from __future__ import annotations

import importlib.util
import pathlib

import torch

RESULTS = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "fp32_ab", RESULTS / "2026-12-04-h200-s54" / "scripts" / "fp32_ab.py")
fp32 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fp32)


def _row(label: str, ref: torch.Tensor, fns: dict) -> None:
    fns = {name: fns[name] for name in ("torch", "now")}
    got = fns["now"]().view(ref.shape)
    err = float((got.double() - ref.double()).abs().max() / ref.double().abs().max())
    assert err < 1e-4, (label, err)
    us = fp32.ab.timed(fns)
    print(f"{label} | {us['torch']:.1f} | {us['now']:.1f} | {us['now'] / us['torch']:.3f}",
          flush=True)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    print("kernel shape | torch us | now us | now/torch")
    for M, N, K in fp32.GEMMS:
        _row(f"gemm {M}x{N}x{K}", *fp32._gemm(M, N, K))
    for rows, G, N, K in fp32.GROUPED:
        _row(f"grouped {G}x{rows}x{N}x{K}", *fp32._grouped(rows, G, N, K, False))
        _row(f"wgrad {G}x{rows}x{N}x{K}", *fp32._grouped(rows, G, N, K, True))


if __name__ == "__main__":
    main()
