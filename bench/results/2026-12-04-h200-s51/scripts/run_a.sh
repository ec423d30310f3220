#!/usr/bin/env bash
# s51a: the consumer GEMM reads every chunk signal at once when a tile meets an unseen chunk
# (one vector of acquire atomics, then a bit set), instead of one poll per chunk: gemm_lab
# twice (the wait cost at K = 1376 was +2.8-3.9% in s50b-s50d), then the GEMM's and the TP
# GEMMs' GPU tests on the changed kernel.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s51a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for r in 1 2; do
  timeout 150 python bench/gemm_lab.py --out $O/lab$r > $O/gemm_lab$r.txt 2>&1; echo "rc=$?" >> $O/gemm_lab$r.txt
  grep -E "cublas|flat\+tstore|rc=" $O/gemm_lab$r.txt | grep -v '^{'
done
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t waits 120 --ditron-backend cuda tests/kernels/test_gemm_waits.py
t gemm 120 tests/kernels/test_gemm_tma.py
t tp 240 --ditron-backend cuda tests/ops/test_tp_gemm.py -k "ops_two_ranks_gpu or reads_own_rows_in_place_gpu or tp_gemms_in_cuda_graph"
