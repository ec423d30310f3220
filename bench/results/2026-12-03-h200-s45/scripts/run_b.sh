#!/usr/bin/env bash
# s45b: after s45a: the routing counts exchanged in one launch (exchange_counts); the
# same tests, the host time with its parts timed alone, the layer timing; the grouped
# GEMM sweep at 128 tokens (decode: 8-16 rows per expert) with 64-row tiles added.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s45b; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt 2>&1
t() {  # t NAME CAP ARGS...: a pytest run on cuda
  local name=$1 cap=$2; shift 2
  timeout $cap python -m pytest -v -p no:cacheprovider --ditron-backend cuda "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "passed|failed|rc=" $O/$name.txt | tail -2
}
t routing_tests 50 tests/kernels/test_routing.py
t moe_tests 150 tests/ops/test_moe.py
t exchange_tests 60 tests/ops/test_collectives.py -k exchange_counts
timeout 60 python bench/diag/moe_host_profile.py cuda 128 30 > $O/host_profile.txt 2>&1
echo "rc=$?" >> $O/host_profile.txt; grep -A6 "host issue" $O/host_profile.txt
timeout 150 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024,8192 \
  --out $O/moe_layer.json > $O/moe_layer.txt 2>&1
echo "rc=$?" >> $O/moe_layer.txt; tail -12 $O/moe_layer.txt
t nn_moe_tests 150 tests/nn/test_moe.py -k "inductor or matches_torch and 2"
timeout 120 python -m ditron bench moe --world-size 1 --parts gemm --sweep --tokens 128 \
  --out $O/gemm_sweep_128.json > $O/gemm_sweep_128.txt 2>&1
echo "rc=$?" >> $O/gemm_sweep_128.txt; tail -8 $O/gemm_sweep_128.txt
