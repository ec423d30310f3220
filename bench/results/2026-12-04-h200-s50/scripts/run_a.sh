#!/usr/bin/env bash
# s50a: session 50's changes on cuda (ranks sharing the one H200): tokens_per_expert as a
# property, the all-to-alls across (simulated) nodes, and session 49's CPU-only tests
# (send_tokens under public_op, combine gradients at W = 2 / 4).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s50a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider --ditron-backend cuda "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t routing 60 tests/kernels/test_routing.py
t moe 200 tests/ops/test_moe.py -k "layer_matches_torch and 2 or simulated or drops or cuda_graph"
t a2a 150 tests/ops/test_collectives.py -k "across_simulated or exchange_counts or all_to_all_device_cuda"
t nn 300 tests/nn/test_moe.py -k "combine_gradients and (2 or 4) or simulated or compile_and_opcheck or inductor"
