#!/bin/bash
# s23c: tma engine stages / box rows sweep (engine level), then every GPU-marked test
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s23c; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
DITRON_HEAP_SIZE=4G timeout 200 python3 scripts/tma_lab.py > $O/tma_lab.txt 2>&1
echo "tma_lab rc=$?" >> $O/tma_lab.txt
timeout 370 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > $O/gpu_tests.txt 2>&1
echo "rc=$?" >> $O/gpu_tests.txt
tail -5 $O/gpu_tests.txt
grep -v "^sm \|^tma " $O/tma_lab.txt | head
