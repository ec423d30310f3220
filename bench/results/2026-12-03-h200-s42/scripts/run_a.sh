#!/usr/bin/env bash
# s42a: session 41's unverified GPU paths: several worlds per process and the nn backward in
# its forward's world (cuda backend, 4 ranks sharing the H200); the GPU-marked nn tests
# (inductor with the custom ops' world argument); reductions at W = 4 and NaN propagation;
# the expert-parallel ops (tests/ops/test_moe.py) on the cuda backend.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s42a; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/runtime/test_groups.py -k "several" > $O/groups.txt 2>&1
echo "rc=$?" >> $O/groups.txt
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu \
  tests/nn/test_linear.py > $O/nn_gpu.txt 2>&1
echo "rc=$?" >> $O/nn_gpu.txt
timeout 130 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/ops/test_reductions.py -k "match_torch and 4 or nan" > $O/reductions.txt 2>&1
echo "rc=$?" >> $O/reductions.txt
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/ops/test_moe.py tests/nn/test_moe.py > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
for f in groups nn_gpu reductions moe; do echo "== $f"; grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/$f.txt | tail -8; done
