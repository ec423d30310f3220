#!/usr/bin/env bash
# s43e: which ditron.nn MoE function differs between eager and torch.compile on the GPU
# (s43c/s43d: every gradient of the compiled layer wrong on the cuda backend, also at W = 1,
# while equal on the CPU backend): each function alone with dynamo's "eager" backend,
# aot_eager, aot_eager without donated buffers; then aot_eager with CUDA_LAUNCH_BLOCKING=1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s43e; mkdir -p $O
timeout 200 python bench/diag/nn_moe_compile_parts.py cuda 1 eager,aot_eager,aot_eager_nodonate > $O/parts.txt 2>&1
echo "rc=$?" >> $O/parts.txt
CUDA_LAUNCH_BLOCKING=1 timeout 100 python bench/diag/nn_moe_compile_parts.py cuda 1 aot_eager > $O/parts_blocking.txt 2>&1
echo "rc=$?" >> $O/parts_blocking.txt
grep -E "W=|rc=|Error" $O/parts.txt | tail -24; echo "== blocking"; grep -E "W=|rc=|Error" $O/parts_blocking.txt | tail -8
