#!/usr/bin/env bash
# s53c: the final gather kernels (the sum as in session 52, the dot on 8 x 128 tiles of all
# copies) against c28433d; the combine lab (forward, forward + backward, the ops alone); on
# cuda the gather tests and the MoE tests that run the combine's backward.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53c; mkdir -p $O
S=bench/results/2026-12-04-h200-s53/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python $S/gather_final.py --old c28433d > $O/final.txt 2>&1; echo "rc=$?" >> $O/final.txt; cat $O/final.txt
timeout 90 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|ops alone|rc=|Error" $O/lab.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 60 $T tests/kernels/test_gather_sum.py > $O/test_gather.txt 2>&1; tail -n 2 $O/test_gather.txt
timeout 240 $T tests/nn/test_moe.py tests/ops/test_moe.py -k "combine_gradients or across_simulated or copy_dots or combine" > $O/test_moe.txt 2>&1; echo "rc=$?" >> $O/test_moe.txt; tail -n 3 $O/test_moe.txt
