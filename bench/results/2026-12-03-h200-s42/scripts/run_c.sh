#!/usr/bin/env bash
# s42c: after s42b: the grouped GEMM in grouped tile order with 128x256x64 tiles by default,
# the device all-to-all with more senders and a finish copy of the received rows only;
# bench moe again (W = 1, tile sweep), then the expert-parallel tests not finished in s42a.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s42c; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 200 python -m ditron bench moe --world-size 1 --sweep --profile --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
timeout 330 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py tests/ops/test_moe.py -k "nn or refuses or cuda_graph" > $O/tests.txt 2>&1
echo "rc=$?" >> $O/tests.txt
grep -E "^(gemm|layer|rc)" $O/moe.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/tests.txt | tail -14
