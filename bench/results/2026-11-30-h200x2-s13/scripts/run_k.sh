#!/bin/bash
# s13k: GEMM-RS on the shapes with N = 4608 and 8192 after a fresh tuner pass with the
# fourth tile candidate (128x256x64, 8 warps, 4 stages), 2 H200s. Lab code, not committed:
# ditron/tune/tuner.py GPU_CANDIDATES + [GemmConfig(128, 256, 64, 8, 8, 4, flatten=True)].
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13k; mkdir -p $R/cache
DITRON_CACHE_DIR=$R/cache timeout 300 python3 -m ditron bench tp-gemm --world-size 2 --ops rs \
  --shapes 4608x36864,8192x28672 --tune --graphs --alt-rs colocated --out $R/bench \
  > $R/tp_rs.txt 2>&1; echo "bench rc=$?"
tr '\r' '\n' < $R/tp_rs.txt | grep "^\[ditron tune\]  " | grep "colocated\|confirmed\|->"
grep "^gemm_rs" $R/tp_rs.txt
