#!/usr/bin/env bash
# s55a (prepared): session 55's tiles for unvectorizable operands against the defaults before
# and torch; on cuda the tests of the changed config choice.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s55a; mkdir -p $O
S=bench/results/2026-12-04-h200-s55/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 300 python $S/unaligned_ab.py > $O/unaligned.txt 2>&1; echo "rc=$?" >> $O/unaligned.txt; cat $O/unaligned.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 240 $T tests/ops/test_tp_gemm.py tests/ops/test_moe.py -k "ops_match_torch or ops_two_ranks_gpu or gpu_default_tiles or grouped" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt; tail -n 3 $O/tests.txt
