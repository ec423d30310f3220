#!/bin/bash
# s25a: boundary costs between GEMM pieces on one H200
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s25a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 60 python3 scripts/boundary_lab.py --shape 8192,4096,5504 > $O/boundary_eager.txt 2>&1
echo "rc=$?" >> $O/boundary_eager.txt
timeout 40 python3 scripts/boundary_lab.py --shape 8192,3584,7168 --rounds 5 >> $O/boundary_eager.txt 2>&1
echo "rc=$?" >> $O/boundary_eager.txt
timeout 80 python3 scripts/boundary_lab.py --shape 8192,4096,5504 --graphs > $O/boundary_graphs.txt 2>&1
echo "rc=$?" >> $O/boundary_graphs.txt
grep -v Warn $O/*.txt
