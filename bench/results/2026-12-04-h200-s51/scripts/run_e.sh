#!/usr/bin/env bash
# s51e: moe_dispatch's scales ride in the rows' own exchange (all_to_all_device_pair: one
# set of launches instead of two): the dispatch bench (bf16 against fp8 + scales, W = 1,
# as s50f), then the fp8 dispatch tests on cuda (W = 1-4, across simulated nodes).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s51e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python -m ditron bench moe --parts dispatch --layer-tokens 128,8192 --out $O/dispatch.json > $O/bench.txt 2>&1
echo "rc=$?" >> $O/bench.txt; tail -12 $O/bench.txt
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t fp8 220 --ditron-backend cuda tests/ops/test_moe.py -k fp8
