#!/bin/bash
# s24c: GPU tests of the exchanges after the fused bump kernel; GPU timelines of the pulled
# GEMM-RS: 4608 x 36864 under graphs, 4096 x 11008 and 4608 x 36864 eagerly
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 300 python3 -m pytest -q -m gpu tests/ops/test_collectives.py tests/ops/test_fused_collectives.py tests/ops/test_out.py tests/engines > $O/pytest_exchanges.txt 2>&1
echo "rc=$?" >> $O/pytest_exchanges.txt; tail -2 $O/pytest_exchanges.txt
for v in "8192,4608,36864 graph_4608 --graph" "8192,4096,11008 eager_4096" "8192,4608,36864 eager_4608"; do
  set -- $v
  timeout 90 python3 bench/op_timeline.py --world-size 2 \
    --shape $1 $3 --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_$2.txt 2>&1
  echo "rc=$?" >> $O/timeline_$2.txt
  echo "== $2"; grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_$2.txt | head -40
done
