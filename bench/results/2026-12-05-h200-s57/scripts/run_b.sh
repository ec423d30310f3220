#!/usr/bin/env bash
# s57b: stream-K against split-K tails in the GEMM lab, with probes: the tails without their
# fix-up (wrong results, timing only) and the tail kernels with every tile whole (dp-only).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s57b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 400 python bench/gemm_lab.py --shapes 8192x1376x4096,8192x6656x16384 --only "lab flat=1,lab swap flat=1,lab sk,lab split,lab dp" --out $O > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -v '^{' $O/lab.txt
