"""Session 12: compile a recorded persistent_gemm launch for sm_90 with the GPU tile config
(no GPU) and count what shows whether Triton pipelined its loads.

    DITRON_GEMM_TMA=1 DITRON_RECORD_LAUNCHES=/tmp/rec python3 <a script running the op>
    python3 compile_probe.py /tmp/rec <EPILOGUE> [flatten]

Prints TMA loads, warp-group MMAs and shared memory of the compiled kernel: a pipelined
128x256x64 bf16 GEMM with 3 stages has 6 TMA loads and 180 KB (flattened) or 147 KB; an
unpipelined one 2 and 49 KB. Epilogue 3 existed at commits 80105bc-4638c43 only (the
removed ``copy_engine_persistent``); 0-2 probe the current kernel.
"""

from __future__ import annotations

import glob
import json
import os
import sys


def main(directory: str, epilogue: int, flatten: bool) -> None:
    sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
    import cuda_compile_check as cc
    from triton.runtime import driver

    driver.set_active(cc._Hopper())
    rec = None
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        for line in open(path):
            r = json.loads(line)
            kw = {k: v.get("value") for k, v in r["kwargs"].items()}
            if ("persistent_gemm" in r["kernel"] and kw.get("EPILOGUE") == epilogue
                    and kw.get("USE_TMA")):
                rec = r
    if rec is None:
        raise SystemExit(f"no TMA persistent_gemm launch with EPILOGUE={epilogue} in "
                         f"{directory}")
    kernel = cc._resolve(rec["kernel"])
    bm, bn, bk = 128, 256, 64
    args = list(rec["args"])
    for i, block in ((0, [bm, bk]), (1, [bn, bk]), (2, [bm, bn])):  # A, B, C (TMA store)
        if "tensordesc" in args[i]:
            d = dict(args[i]["tensordesc"], dtype="bfloat16", block_shape=block,
                     shape=[8192, 5504], strides=[5504, 1])
            args[i] = {"tensordesc": d}
    kw = {k: v["value"] for k, v in rec["kwargs"].items()}
    kw.update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, FLATTEN=flatten, UPCAST=False,
              GPU_TIMER=True, DOT_PRECISION="tf32", num_warps=8, num_stages=3)
    compiled = kernel.warmup(*[cc._build(d) for d in args], grid=(1,), **kw)
    ttgir = compiled.asm["ttgir"]
    print(f"EPILOGUE {epilogue} flatten={flatten}: "
          f"tma_loads {ttgir.count('async_tma_copy_global_to_local')} "
          f"wgmma {ttgir.count('warp_group_dot')} shared {compiled.metadata.shared}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3 and sys.argv[3] == "flatten")
