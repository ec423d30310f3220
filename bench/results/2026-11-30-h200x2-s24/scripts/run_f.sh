#!/bin/bash
# s24f: pulled GEMM-RS under graphs, the pulls' spinning waits started right after the
# matching GEMM piece (before its publish; RS_EARLY_WAITS) against after the publish
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
DITRON_RS_EARLY_WAITS=1 timeout 90 python3 bench/op_timeline.py --world-size 2 --shape 8192,4608,36864 --graph \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_graph_4608_early.txt 2>&1
echo "rc=$?" >> $O/timeline_graph_4608_early.txt
grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_graph_4608_early.txt | head -30
for v in "0 after_publish" "1 early"; do
  set -- $v
  DITRON_RS_EARLY_WAITS=$1 DITRON_CACHE_DIR=$(mktemp -d) timeout 150 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs \
    --shapes 4096x11008,4608x36864 --out /tmp/bench_$2 > $O/bench_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_$2.txt
  echo "== bench $2"; tail -12 $O/bench_$2.txt | grep "gemm_rs\|eff"
done
