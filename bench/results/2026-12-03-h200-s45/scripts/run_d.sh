#!/usr/bin/env bash
# s45d: the grouped GEMM's default picks 64 x 128 tiles with pointer loads up to 128 rows
# per group (s45c): its GPU tests, and the layer and GEMM timings with it.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s45d; mkdir -p $O
timeout 60 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm or cuda_graph" > $O/grouped_tests.txt 2>&1
echo "rc=$?" >> $O/grouped_tests.txt; grep -E "passed|failed|rc=" $O/grouped_tests.txt | tail -2
timeout 90 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024 \
  --out $O/moe_layer.json > $O/moe_layer.txt 2>&1
echo "rc=$?" >> $O/moe_layer.txt; tail -4 $O/moe_layer.txt
timeout 50 python -m ditron bench moe --world-size 1 --parts gemm --tokens 128 \
  --out $O/gemm_128.json > $O/gemm_128.txt 2>&1
echo "rc=$?" >> $O/gemm_128.txt; tail -5 $O/gemm_128.txt
