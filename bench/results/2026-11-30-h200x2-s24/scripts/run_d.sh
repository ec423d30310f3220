#!/bin/bash
# s24d: the pulled GEMM-RS's GEMM pieces leave SMs to its spinning waits under graphs
# (RS_WAIT_SMS, torch's SM carveout): carveout check, timeline 4608 x 36864, bench on/off
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 60 python3 scripts/carveout_check.py > $O/carveout_check.txt 2>&1; cat $O/carveout_check.txt
timeout 90 python3 bench/op_timeline.py --world-size 2 --shape 8192,4608,36864 --graph \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_graph_4608.txt 2>&1
echo "rc=$?" >> $O/timeline_graph_4608.txt
grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_graph_4608.txt | head -40
for v in "0 carve_off" "1 carve_on"; do
  set -- $v
  if [ $1 = 0 ]; then export DITRON_RS_WAIT_SMS=0; else unset DITRON_RS_WAIT_SMS; fi
  DITRON_CACHE_DIR=$(mktemp -d) timeout 170 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs \
    --shapes 4096x11008,3584x14336,4608x36864 --out /tmp/bench_$2 > $O/bench_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_$2.txt
  echo "== bench $2"; tail -16 $O/bench_$2.txt | grep "gemm_rs\|eff"
done
