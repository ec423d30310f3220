#!/usr/bin/env bash
# s49b: gather_dot with column slices (few tokens: more programs than token blocks), the
# combine lab again (new vs old, and the ops under the new one alone), the gather kernels'
# tests, and the ditron.nn MoE tests the s49a cap cut (from_experts, refusals, compile +
# opcheck with moe_send_tokens, inductor).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
t() { local name=$1 lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider --ditron-backend cuda "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
timeout 80 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|ops alone|rc=|Error" $O/lab.txt
t kernels 60 tests/kernels/test_gather_sum.py
t nn 300 tests/nn/test_moe.py -k "from_experts or refuses or compile"
