#!/usr/bin/env bash
# s50f: the final code on cuda: fp8 dispatch with x_scales (tests, and bf16 vs fp8 + scales
# timed at W = 1), then every GPU-only test (-m gpu), ranks sharing the H200.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s50f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 100 python -m ditron bench moe --parts dispatch --layer-tokens 128,8192 --out $O/dispatch.json > $O/dispatch.txt 2>&1
echo "rc=$?" >> $O/dispatch.txt; grep -E "^dispatch|rc=|Error" $O/dispatch.txt
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t fp8 120 --ditron-backend cuda tests/ops/test_moe.py -k "fp8"
t gpu 300 -m gpu tests
