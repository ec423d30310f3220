#!/usr/bin/env bash
# The per-call cost of debug mode (a wait timeout: spinning waits that can time out, and
# DITRON_CHECK_CALLS' every-call agreement, one host gather per call) on CUDA: two ranks
# sharing one GPU, the same collectives timed without and with DITRON_WAIT_TIMEOUT.
# Outputs under $OUT/debug_cost/<mode>.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD
args="--world-size 2 --sizes 64K,4M --ops all_reduce,all_gather --engines sm --warmup 10 --iters 30"
for mode in plain debug; do
  case $mode in
    plain) env=();;
    debug) env=(DITRON_WAIT_TIMEOUT=30);;
  esac
  echo "== $mode ${env[*]}"
  env "${env[@]}" timeout ${CAP_S:-70} python -m ditron bench collectives $args --out $OUT/debug_cost/$mode 2>&1 | grep -vE "^\[bench\]" | tail -12
done
