#!/bin/bash
# s23g: all-reduce under CUDA graphs, 8 KB-4 MB, against NCCL and PyTorch's symmetric-memory kernels
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s23g; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 200 python3 -m ditron bench collectives --world-size 2 --ops all_reduce --engines sm \
  --sizes 8K,64K,256K,1M,4M --graphs --graph-max 4M --out $O/ar > $O/ar.txt 2>&1
echo "rc=$?" >> $O/ar.txt
grep "graph\|rc=" $O/ar.txt
