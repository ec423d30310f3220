#!/usr/bin/env bash
# s38d: after the bound launch encodes the TMA descriptors once (runtime/triton_launch.py)
# and descriptors became the megakernel's default on sm_90: host and GPU time, t0 against
# t1 against the default; 4 layers, bf16, W = 1. Then the megakernel's GPU tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
export DITRON_CACHE_DIR=$OUT/s38d/cache
O=$OUT/s38d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
mk() { name=$1; shape=$2; t=$3; shift 3; (timeout $t python -m ditron bench megakernel --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "kernels\|batch8\|host\|Error\|error:\|<-" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
mk small 16,1024,2816 100 --blocks 16x64x256x256x4t0,16x64x256x256x4t1,16x64x256x256x4
mk t16 16,4096,11008 100 --blocks 16x128x128x256x4t0,16x128x128x256x4t1
mk t128 128,4096,11008 100 --blocks 128x128x64x256x4s4w8t0,128x128x64x256x4s4w8t1
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs $O/cache
cat $O/summary.txt
timeout 280 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/task/test_megakernel.py -k "stack_gpu or cuda_graph or descriptors" tests/runtime/test_triton_launch.py \
  > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/pytest.txt | tail -30
