#!/usr/bin/env bash
# s42e: the MoE layer with each grouped-GEMM method forced, in one run, at 128 / 1024 / 8192
# tokens (16 / 128 / 1024 rows per expert): where "auto" should switch to torch._grouped_mm.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s42e; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 200 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024,8192 \
  --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
grep -E "^(layer|rc)" $O/moe.txt
