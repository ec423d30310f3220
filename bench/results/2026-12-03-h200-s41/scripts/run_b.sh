#!/usr/bin/env bash
# s41b: the group-world tests that run on the cuda backend (4 ranks sharing the H200):
# ops in group worlds, the megakernel and nn layers in groups, three worlds per process.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s41b; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 170 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/runtime/test_groups.py -k "span or several or megakernel" > $O/groups.txt 2>&1
echo "rc=$?" >> $O/groups.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/groups.txt | tail -12
