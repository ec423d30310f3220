#!/usr/bin/env bash
# s52d: every GPU-marked test on the session's final kernels (2 ranks sharing the GPU), one
# line per test so a run cut short by its limit still says what passed.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s52d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 530 python -m pytest -v -p no:cacheprovider -m gpu tests/ > $O/gpu_marked_tests.txt 2>&1
echo "rc=$?" >> $O/gpu_marked_tests.txt; grep -cE " PASSED" $O/gpu_marked_tests.txt; grep -E "FAILED|ERROR" $O/gpu_marked_tests.txt | head; tail -3 $O/gpu_marked_tests.txt
