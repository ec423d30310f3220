#!/bin/bash
# s24i: the eager pulled GEMM-RS with its publishes on the signal lane (stream memory
# operations there) against on the compute stream; GPU tests, timeline, bench
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24i; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_tp_gemm.txt 2>&1
echo "rc=$?" >> $O/pytest_tp_gemm.txt; tail -2 $O/pytest_tp_gemm.txt
timeout 60 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --head-start-us 20000 \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_eager_head.txt 2>&1
echo "rc=$?" >> $O/timeline_eager_head.txt
grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_eager_head.txt | head -24
for v in "0 compute" "1 lane"; do
  set -- $v
  DITRON_RS_EAGER_LANE=$1 DITRON_CACHE_DIR=$(mktemp -d) timeout 90 python3 -m ditron bench tp-gemm --world-size 2 --ops rs \
    --shapes 4096x11008,3584x14336 --out /tmp/bench_$2 > $O/bench_eager_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_eager_$2.txt
  echo "== bench $2"; tail -6 $O/bench_eager_$2.txt | grep "gemm_rs\|eff"
done
