#!/usr/bin/env bash
# s57a (prepared, nvidia-h200): fp32_now.py, the fp32 defaults against torch. Chain it with
# session 54's pytest -m gpu part 1, from the repository root:
#   R=bench/results; bash $R/2026-12-05-h200-s56/scripts/chain.sh \
#     $R/2026-12-05-h200-s56/scripts/next_a.sh $R/2026-12-04-h200-s54/scripts/run_b.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s57a; mkdir -p $O
S=bench/results/2026-12-05-h200-s56/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python $S/fp32_now.py > $O/fp32.txt 2>&1; echo "rc=$?" >> $O/fp32.txt; cat $O/fp32.txt
