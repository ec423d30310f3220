#!/usr/bin/env bash
# s56c: the gather kernels' new tiles against 3bc3ca6's; on cuda the gather tests and the MoE
# combine tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s56c; mkdir -p $O
S=bench/results/2026-12-05-h200-s56/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 140 python $S/tiles_ab.py > $O/tiles.txt 2>&1; echo "rc=$?" >> $O/tiles.txt; cat $O/tiles.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 45 $T tests/kernels/test_gather_sum.py > $O/test_gather.txt 2>&1; tail -n 2 $O/test_gather.txt
timeout 60 $T tests/ops/test_moe.py -k "combine_gradients or across_simulated or copy_dots or combine" > $O/test_moe.txt 2>&1; echo "rc=$?" >> $O/test_moe.txt; tail -n 3 $O/test_moe.txt
