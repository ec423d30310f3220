#!/bin/bash
# s13g: ag after a fresh tuner pass, on the host-path changes (2 H200s).
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13g; mkdir -p $R/cache
git log -1 --format=%H > $R/commit.txt; git status --short >> $R/commit.txt
DITRON_CACHE_DIR=$R/cache timeout 560 python3 -m ditron bench tp-gemm --world-size 2 --ops ag \
  --tune --graphs --out $R/bench > $R/tp_ag.txt 2>&1; echo "bench rc=$?"
grep -v Warning $R/tp_ag.txt | grep -v "^\[ditron tune\]" | tail -22
