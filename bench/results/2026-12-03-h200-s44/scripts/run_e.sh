#!/usr/bin/env bash
# s44e: the grouped weight gradient with TMA loads: its tests on the GPU, the layer's
# gradients at W = 2, and TMA against pointer loads on REFERENCES.md's MoE shapes.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=60
O=$OUT/s44e; mkdir -p $O
timeout 40 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k wgrad > $O/wgrad_tests.txt 2>&1
echo "rc=$?" >> $O/wgrad_tests.txt; grep -E "passed|failed|rc=" $O/wgrad_tests.txt | tail -2
timeout 60 python -m ditron bench moe --world-size 1 --parts wgrad --iters 12 --rounds 3 \
  --out $O/wgrad.json > $O/wgrad.txt 2>&1
echo "rc=$?" >> $O/wgrad.txt; tail -5 $O/wgrad.txt
timeout 70 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  -k "matches_torch and 2" > $O/nn_layer.txt 2>&1
echo "rc=$?" >> $O/nn_layer.txt; grep -E "passed|failed|rc=" $O/nn_layer.txt | tail -2
