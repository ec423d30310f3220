#!/bin/bash
# s24b: pulled GEMM-RS with the own-row GEMMs on a stream of their own (RS_OWN_LANE) against
# on the compute stream (signal lane on in both); GPU tests, timelines, bench
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_tp_gemm.txt 2>&1
echo "rc=$?" >> $O/pytest_tp_gemm.txt; tail -2 $O/pytest_tp_gemm.txt
for v in "0 graph_own_off --graph" "1 graph_own_on --graph" "1 eager_own_on"; do
  set -- $v
  DITRON_RS_OWN_LANE=$1 timeout 80 python3 bench/op_timeline.py --world-size 2 \
    --shape 8192,4096,11008 $3 --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_$2.txt 2>&1
  echo "rc=$?" >> $O/timeline_$2.txt
  echo "== $2"; grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_$2.txt | head -40
done
for v in "0 own_off" "1 own_on"; do
  set -- $v
  DITRON_RS_OWN_LANE=$1 DITRON_CACHE_DIR=$(mktemp -d) timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs \
    --shapes 4096x11008,3584x14336,4608x36864 --out /tmp/bench_$2 > $O/bench_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_$2.txt
  echo "== bench $2"; tail -16 $O/bench_$2.txt
done
