#!/usr/bin/env bash
# each argument one pytest argument string; runs it with a cap (CAP_S), dumping every Python
# stack of its process group (SIGUSR1, faulthandler) before killing it at the cap
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd):$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
i=${START:-0}
for arg in "$@"; do
  i=$((i+1)); f=$OUT/probe_$i.txt
  { cat COMMIT; nvidia-smi -L; echo "args: $arg"; } > $f
  t0=$(date +%s)
  setsid bash -c "python -m pytest -v -s -p no:cacheprovider --durations=0 $arg" >> $f 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null && (( $(date +%s) - t0 < ${CAP_S:-100} )); do sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    echo "=== CAP REACHED: dumping stacks" >> $f
    kill -USR1 -- -$pid; sleep 3; kill -9 -- -$pid; sleep 1
  fi
  wait $pid; echo "rc=$? after $(( $(date +%s) - t0 )) s" >> $f
  echo "== $i ($arg)"; grep -E "PASSED|FAILED|ERROR|rc=|CAP" $f | tail -6
done
