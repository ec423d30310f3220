#!/usr/bin/env bash
# s48g: the combine's weights gradient read in place (gather_dot, ditron::moe_copy_dots)
# instead of fp32 copies fetched again (s48f): the combine lab (new vs the old fp32-copies
# formulation, same run), then the gather-sum / gather-dot kernel tests on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=60
O=$OUT/s48g; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 55 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt
timeout 35 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/kernels/test_gather_sum.py \
  > $O/kernels.txt 2>&1; echo "rc=$?" >> $O/kernels.txt
grep -E "FAIL|passed|failed|rc=" $O/kernels.txt | tail -4
