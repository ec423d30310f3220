"""Compile a recorded persistent_gemm launch for sm_90 with the GPU tiles; print TMA loads,
wgmma count and shared memory."""
from __future__ import annotations

import glob
import json
import os
import sys


def main(directory: str, epilogue: int, flatten: bool, stages: int) -> None:
    sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
    import cuda_compile_check as cc
    from triton.runtime import driver

    driver.set_active(cc._Hopper())
    rec = None
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        for line in open(path):
            r = json.loads(line)
            kw = {k: v.get("value") for k, v in r["kwargs"].items()}
            if "persistent_gemm" in r["kernel"] and kw.get("EPILOGUE") == epilogue:
                rec = r
    kernel = cc._resolve(rec["kernel"])
    bm, bn, bk = 128, 256, 64
    args = list(rec["args"])
    blocks = {0: ([bm, bk], [8192, 5504]), 1: ([bn, bk], [4096, 5504]),
              2: ([bm, bn], [4096, 4096])}
    for i, a in enumerate(args):
        if isinstance(a, dict) and "tensordesc" in a:
            block, shape = blocks.get(i, ([bm, bn], [8192, 4096]))
            strides = [shape[1], 1]
            d = dict(a["tensordesc"], dtype="bfloat16", block_shape=block, shape=shape,
                     strides=strides)
            args[i] = {"tensordesc": d}
        elif isinstance(a, dict) and a.get("tensor") == "float32":
            args[i] = {"tensor": "bfloat16"}
    kw = {k: v["value"] for k, v in rec["kwargs"].items()}
    kw.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, FLATTEN=flatten, UPCAST=False,
              GPU_TIMER=True, DOT_PRECISION="tf32", num_warps=8, num_stages=stages)
    compiled = kernel.warmup(*[cc._build(d) for d in args], grid=(1,), **kw)
    ttgir = compiled.asm["ttgir"]
    print(f"EPILOGUE {epilogue} flatten={flatten} stages={stages}: "
          f"tma_loads {ttgir.count('async_tma_copy_global_to_local')} "
          f"tma_stores {ttgir.count('async_tma_copy_local_to_global')} "
          f"wgmma {ttgir.count('warp_group_dot')} shared {compiled.metadata.shared}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]))
