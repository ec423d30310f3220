#!/usr/bin/env bash
# s39b: s39a's host-cost rows again, the descriptor encodings kept and not kept in
# alternating rounds (s39a measured them once each, minutes apart); the TP GEMM ops' host
# breakdown at 2 ranks sharing the H200 (its list of timed functions brought up to date),
# kept / every launch / kept.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s39b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python bench/gemm_launch_cost.py --out $O > $O/gemm_launch_cost_stdout.txt 2>&1
head -12 $O/gemm_launch_cost.txt
n=0
for mode in "" "--encode-every-launch" ""; do
  n=$((n+1)); f=$O/host_breakdown_$n${mode:+_every}.txt
  echo "== host_breakdown $n $mode"
  timeout 150 python bench/host_breakdown.py --world-size 2 --calls 100 --shape 2048,4096,4096 $mode > $f 2>&1
  grep -E "^== |^not timed|make_tensordesc|launch_gemm|Error" $f | head -40
done
