#!/usr/bin/env bash
# s46h: the gated (SwiGLU) experts on cuda: the inductor compile test (now a gated layer)
# and the gated layer against the float64 model at W = 2.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s46h; mkdir -p $O
timeout 110 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  -k "inductor or gated_experts_match_torch and 2" > $O/tests.txt 2>&1
echo "rc=$?" >> $O/tests.txt; grep -E "PASSED|FAILED|passed|failed|rc=" $O/tests.txt
