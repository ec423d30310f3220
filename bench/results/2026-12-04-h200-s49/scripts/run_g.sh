#!/usr/bin/env bash
# s49g: zero_missing (the gradient sends zero the rows past the groups in the finishing
# kernel, no torch.where pass): the cuda all-to-all tests, ditron.nn's combine gradients,
# MLP at W = 2 and compile + opcheck on cuda, the combine lab and the nn combine profile.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49g; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
t() { local name=$1 lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider --ditron-backend cuda "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
timeout 80 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|ops alone|rc=|Error" $O/lab.txt
timeout 60 python bench/diag/nn_combine_profile.py 1024 20 > $O/profile.txt 2>&1; echo "rc=$?" >> $O/profile.txt
sed -n 3,5p $O/profile.txt; grep "Self CUDA time total" $O/profile.txt | head -1
t a2a 120 tests/ops/test_collectives.py -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph"
t nn 200 tests/nn/test_moe.py -k "combine_gradients or matches_torch and 2 or compile_and_opcheck"
