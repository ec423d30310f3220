#!/usr/bin/env bash
# s43c: ditron.nn's MoE on torch custom ops: the GPU-marked inductor test (two ranks
# sharing the H200) and tests/nn/test_moe.py on the cuda backend (aot_eager compile +
# opcheck, the layer at W = 2, autocast).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=250
O=$OUT/s43c; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 280 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu \
  tests/nn/test_moe.py > $O/nn_moe_gpu.txt 2>&1
echo "rc=$?" >> $O/nn_moe_gpu.txt
timeout 280 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py -k "compile or matches_torch and 2 or autocast" > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt
for f in nn_moe_gpu nn_moe; do echo "== $f"; grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/$f.txt | tail -12; done
