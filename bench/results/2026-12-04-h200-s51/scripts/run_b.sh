#!/usr/bin/env bash
# s51b: as s51a, and every slot's tile id and chunk range are read one tile ahead (the wait
# range from a per-slot table, GemmHooks.waits), so no tile prologue waits on a table load:
# gemm_lab three times, then the GEMM's and the TP GEMMs' GPU tests and the docs example.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s51b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for r in 1 2 3; do
  timeout 150 python bench/gemm_lab.py --out $O/lab$r > $O/gemm_lab$r.txt 2>&1; echo "rc=$?" >> $O/gemm_lab$r.txt
  grep -E "cublas|flat\+tstore|rc=" $O/gemm_lab$r.txt | grep -v '^{'
done
t() { name=$1; lim=$2; shift 2
  timeout $lim python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt; echo "== $name"; grep -E "FAIL|passed|failed|rc=" $O/$name.txt | tail -4; }
t waits 120 --ditron-backend cuda tests/kernels/test_gemm_waits.py
t gemm 120 tests/kernels/test_gemm_tma.py
t tp 240 --ditron-backend cuda tests/ops/test_tp_gemm.py -k "ops_two_ranks_gpu or reads_own_rows_in_place_gpu or tp_gemms_in_cuda_graph"
t doc 120 --ditron-backend cuda tests/ops/test_docs_example.py
