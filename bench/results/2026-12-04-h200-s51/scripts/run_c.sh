#!/usr/bin/env bash
# s51c: GPU-only tests that run the changed consumer GEMM through the TP layers (nn MLP,
# megakernel TP MLP stack) and the -m gpu tests session 50 left unrun on its final code
# (replays, chunked exchanges), ranks sharing the H200.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s51c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t nn 190 -m gpu tests/nn/test_linear.py
t task 150 -m gpu tests/task/test_megakernel.py
t out 170 -m gpu tests/ops/test_out.py tests/ops/test_collectives.py -k "replays or direct or chunked"
