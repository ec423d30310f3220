#!/usr/bin/env bash
# s43b: tests/nn/test_moe.py on the cuda backend (s43a's 150 s cap cut it at W = 3), and
# the reduce-overhead training step (cut by a 150 s cap in s42a).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=250
O=$OUT/s43b; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 300 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt
timeout 260 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu \
  tests/nn/test_linear.py -k reduce_overhead > $O/reduce_overhead.txt 2>&1
echo "rc=$?" >> $O/reduce_overhead.txt
for f in nn_moe reduce_overhead; do echo "== $f"; grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/$f.txt | tail -12; done
