"""Host cost of one grouped GEMM call, broken down (one GPU, tiny shapes: the GPU never
holds the host back, so a call's time is its host time).

Prints the CPU microseconds per call (best of 3 runs of 300 back-to-back calls) of:
``torch._grouped_mm``; an empty Triton kernel through ``FastKernel``; the kernel wrapper
``ditron.kernels.grouped_gemm.grouped_gemm`` with ``out`` given and a config given, with
the default config, with ``out`` allocated; ``ditron.ops.grouped_gemm`` (the public op);
the pieces (``check_grouped``, ``default_config``, ``torch.empty``); then a cProfile of
the public op by own time.

    PYTHONPATH=$PWD python bench/diag/grouped_gemm_host.py [--out DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats

import torch

import ditron
from bench.gemm_launch_cost import empty_kernel, host_us
from ditron.kernels import grouped_gemm as gg
from ditron.runtime.triton_launch import FastKernel

_EMPTY = FastKernel(empty_kernel)


def measure(out_dir: str) -> str:
    dev = ditron.world().device
    G, R, K, N = 8, 64, 128, 256
    x = torch.randn(R, K, device=dev, dtype=torch.bfloat16)
    w = torch.randn(G, K, N, device=dev, dtype=torch.bfloat16)
    offsets = torch.arange(0, R + 1, R // G, device=dev)
    out = torch.empty(R, N, device=dev, dtype=torch.bfloat16)
    small = gg.default_config(dev, x.dtype, 8)
    large = gg.default_config(dev, x.dtype)
    ends = offsets[1:].to(torch.int32)
    rows = {
        "torch._grouped_mm": lambda: torch._grouped_mm(x, w, offs=ends),
        "empty kernel (FastKernel)": lambda: _EMPTY[(1,)](x),
        "kernels, out + small cfg": lambda: gg.grouped_gemm(x, w, offsets, out=out,
                                                             config=small),
        "kernels, out + large cfg (TMA)": lambda: gg.grouped_gemm(x, w, offsets, out=out,
                                                                  config=large),
        "kernels, out, default cfg": lambda: gg.grouped_gemm(x, w, offsets, out=out),
        "kernels, default": lambda: gg.grouped_gemm(x, w, offsets),
        "ops.grouped_gemm": lambda: ditron.ops.grouped_gemm(x, w, offsets),
        "ops.grouped_gemm, out, triton": lambda: ditron.ops.grouped_gemm(
            x, w, offsets, out=out, method="triton"),
        "check_grouped": lambda: gg.check_grouped("p", x, w, offsets),
        "default_config": lambda: gg.default_config(dev, x.dtype, 8.0),
        "torch.empty": lambda: torch.empty((R, N), dtype=x.dtype, device=dev),
        "descriptors (large cfg)": lambda: gg._descriptors(x, w, large),
    }
    lines = [f"{torch.cuda.get_device_name(dev)}: host us per call, G={G} R={R} K={K} N={N}"]
    for name, fn in rows.items():
        try:
            lines.append(f"{name:<34}{host_us(fn):8.1f}")
        except Exception as exc:  # noqa: BLE001 - report and go on
            lines.append(f"{name:<34}failed: {type(exc).__name__}: {str(exc)[:300]}")
        print(lines[-1], flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        ditron.ops.grouped_gemm(x, w, offsets)
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    text = "\n".join(lines) + "\n\n" + s.getvalue()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "grouped_gemm_host.txt"), "w") as f:
        f.write(text)
    return text


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = p.parse_args()
    print(ditron.launch(measure, 1, args.out, backend="cuda")[0][-4000:])
