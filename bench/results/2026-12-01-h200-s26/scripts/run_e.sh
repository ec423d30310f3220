#!/bin/bash
# s26e (two H200s): the eager pulled GEMM-RS (alt column) as in session 24 (acknowledgements
# sent and waited, publishes on the compute stream) against now (implied by data, publishes
# on the signal lane); then now's GPU timeline with a head start
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s26e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for v in "0 old" "1 new" "0 old2" "1 new2"; do
  set -- $v
  DITRON_ACK_BY_DATA=$1 DITRON_EAGER_SIGNAL_LANE=$1 DITRON_CACHE_DIR=$(mktemp -d) timeout 120 \
    python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008,4096x14336,3584x14336 \
    --out $O/bench_$2 > $O/bench_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_$2.txt
  echo "== $2"; grep "gemm_rs " $O/bench_$2.txt
done
timeout 60 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --head-start-us 20000 \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_new.txt 2>&1
echo "rc=$?" >> $O/timeline_new.txt
grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_new.txt | head -30
