#!/usr/bin/env bash
# s42b: expert parallelism on one H200 (W = 1): the grouped GEMM on REFERENCES.md's MoE shapes
# (8192 tokens) against a torch.matmul loop, torch._grouped_mm and a dense GEMM, with a tile
# sweep; the MoE layer (dispatch + 2 grouped GEMMs + combine) against torch.distributed + loop.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=300
O=$OUT/s42b; mkdir -p $O
nvidia-smi -L > $O/device.txt
timeout 560 python -m ditron bench moe --world-size 1 --sweep --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
cat $O/moe.txt | tail -20
