#!/usr/bin/env bash
# s49e: the custom-op layer's host cost (bench/diag/nn_combine_profile.py ... ops; it was
# bench/diag/custom_op_host.py when this ran), and the torch
# source of custom_ops.backend_impl where s49d's cProfile put 1.1 ms of own time per call.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python bench/diag/nn_combine_profile.py 1024 30 ops > $O/host.txt 2>&1; echo "rc=$?" >> $O/host.txt
cat $O/host.txt | tail -7
F=$(python -c "import torch._library.custom_ops as m; print(m.__file__)")
sed -n 300,360p $F > $O/custom_ops_300_360.txt; grep -n "backend_impl" $F | head
