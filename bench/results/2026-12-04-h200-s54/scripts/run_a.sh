#!/usr/bin/env bash
# s54a: session 53's untimed gather tiles (fp32 rows, unvectorized rows, > 8 copies) against
# cd26679's and other tiles; on cuda the gather tests and the MoE tests that run the combine.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s54a; mkdir -p $O
S=bench/results/2026-12-04-h200-s54/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 330 python $S/shrunk_ab.py --old cd26679 > $O/shrunk.txt 2>&1; echo "rc=$?" >> $O/shrunk.txt; grep -v "^   " $O/shrunk.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 60 $T tests/kernels/test_gather_sum.py > $O/test_gather.txt 2>&1; tail -n 2 $O/test_gather.txt
timeout 150 $T tests/ops/test_moe.py -k "combine_gradients or across_simulated or copy_dots or combine" > $O/test_moe.txt 2>&1; echo "rc=$?" >> $O/test_moe.txt; tail -n 3 $O/test_moe.txt
