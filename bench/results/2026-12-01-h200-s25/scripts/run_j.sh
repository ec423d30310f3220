#!/bin/bash
# s25j (one H200, two ranks sharing it): issue 5's step 4 script, the collectives and fused families
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s25j; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python3 bench/check_ops_at_scale.py --world-size 2 --only fused,collectives > $O/check_ops_coll.txt 2>&1
echo "rc=$?" >> $O/check_ops_coll.txt; grep -v Warn $O/check_ops_coll.txt | tail -5
