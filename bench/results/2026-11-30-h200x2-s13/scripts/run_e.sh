#!/bin/bash
# s13e: the host-path changes on 2 H200s: host cost per call, the two small GEMM-RS shapes
# with s12c's tuned decisions, then every GPU test.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13e; mkdir -p $R/cache
cp bench/results/2026-11-30-h200x2-s12/s12c/cache/tune.json $R/cache/
git log -1 --format=%H > $R/commit.txt; git status --short >> $R/commit.txt
timeout 60 python3 bench/results/2026-11-30-h200x2-s13/scripts/host_fine.py --calls 100 > $R/host_fine.txt 2>&1; echo "host_fine rc=$?"
timeout 60 python3 bench/results/2026-11-30-h200x2-s13/scripts/host_gpu_profile.py > $R/host_gpu_profile.txt 2>&1; echo "profile rc=$?"
grep "==" $R/host_gpu_profile.txt
DITRON_CACHE_DIR=$R/cache timeout 200 python3 -m ditron bench tp-gemm --world-size 2 --ops rs \
  --shapes 4096x11008,3584x14336 --graphs --out $R/bench > $R/tp_rs.txt 2>&1; echo "bench rc=$?"
grep -v Warning $R/tp_rs.txt | tail -14
timeout 230 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "tests rc=$?"
tail -5 $R/gpu_tests.txt
