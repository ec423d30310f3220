#!/usr/bin/env bash
# s49h: the rest of ditron.nn's MoE tests on cuda after zero_missing (gated experts at
# W = 2, drops, autocast, the rows hint).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s49h; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 230 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  -k "gated_experts_match_torch and 2 or with_drops or autocast or rows_per_expert" > $O/nn.txt 2>&1
echo "rc=$?" >> $O/nn.txt; grep -E "PASS|FAIL|passed|failed|rc=" $O/nn.txt | tail -8
