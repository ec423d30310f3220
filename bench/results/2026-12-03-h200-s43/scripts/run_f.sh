#!/usr/bin/env bash
# s43f: ditron.nn's MoE ops with torch.library autograd formulas instead of
# autograd.Functions (s43e: the compiled combine's gradients were wrong on the GPU, even
# with dynamo's "eager" backend): the compile tests (aot_eager + opcheck on the cuda
# backend; inductor) and the layer at W = 2.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s43f; mkdir -p $O
timeout 170 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py -k "compile or matches_torch and 2" > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=|AssertionError: rank" $O/nn_moe.txt | tail -12
