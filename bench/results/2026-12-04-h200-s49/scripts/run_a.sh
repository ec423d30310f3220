#!/usr/bin/env bash
# s49a: GPU-verify session 48's last commits (gather_dot weights gradient, out shape fix) and
# send_scale (the combine's y gradient weighted as g's rows move): the combine lab (new vs
# the old fp32-copies formulation, same run), the gather-sum / gather-dot kernel tests,
# ditron.nn's MoE tests, the dtype and the cuda all-to-all tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s49a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
t() { local name=$1 lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider --ditron-backend cuda "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
timeout 60 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt
t kernels 60 tests/kernels/test_gather_sum.py tests/kernels/test_routing.py
t nn 200 tests/nn/test_moe.py
t dtypes 150 tests/ops/test_dtypes.py
t a2a 150 tests/ops/test_collectives.py -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph"
