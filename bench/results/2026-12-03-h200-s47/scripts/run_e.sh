#!/usr/bin/env bash
# s47e: GPU_SENDERS 128 -> 256 (s47d's lab): the MoE layer, and the device all-to-all on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s47e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 110 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024,8192 \
  --out $O/layer.json > $O/layer.txt 2>&1; echo "rc=$?" >> $O/layer.txt
grep -E "^layer|rc=" $O/layer.txt
timeout 100 python -m pytest -v -p no:cacheprovider tests/ops/test_collectives.py \
  -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph" > $O/a2a.txt 2>&1; echo "rc=$?" >> $O/a2a.txt
grep -E "FAIL|passed|failed|rc=" $O/a2a.txt | tail -4
