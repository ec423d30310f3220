#!/usr/bin/env bash
# s53e: ditron.nn's MoE tests that run the combine's backward (gather-dot on the new tiles)
# on cuda: the layer against torch at W = 1-4, gated experts, drops, autocast, opcheck and
# the inductor-compiled layer.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 440 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py -k "matches_torch or gated or drops or autocast or opcheck or inductor" > $O/test_nn_moe.txt 2>&1
echo "rc=$?" >> $O/test_nn_moe.txt; grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/test_nn_moe.txt | tail -20
