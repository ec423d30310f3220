#!/usr/bin/env bash
# s53b: the gather kernels loading every copy of a token block at once, over a sweep of
# tiles, against session 52's (c28433d) unrolled and looped copy loops; their tests on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53b; mkdir -p $O
S=bench/results/2026-12-04-h200-s53/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 300 python $S/gather_sweep.py --old c28433d > $O/sweep.txt 2>&1; echo "rc=$?" >> $O/sweep.txt; cat $O/sweep.txt
timeout 100 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/kernels/test_gather_sum.py > $O/test_gather.txt 2>&1; tail -n 2 $O/test_gather.txt
