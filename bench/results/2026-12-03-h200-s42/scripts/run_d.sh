#!/usr/bin/env bash
# s42d: ops.grouped_gemm's "auto" (torch._grouped_mm where it takes the call) and the
# gather-sum combine: bench moe again (W = 1), then the GPU-marked MoE tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s42d; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 200 python -m ditron bench moe --world-size 1 --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/ops/test_moe.py \
  > $O/tests.txt 2>&1
echo "rc=$?" >> $O/tests.txt
grep -E "^(gemm|layer|rc)" $O/moe.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/tests.txt | tail -6
