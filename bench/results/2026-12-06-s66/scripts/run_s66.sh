#!/usr/bin/env bash
# s66: GPU checks of session 65's changes (agreement in every op, megakernel schedule
# agreement and free(), the plan lowering's waits). Parts a, b, e, w2 are session 65's
# (see ../../2026-12-06-s65/scripts/run_s65.sh); part p is new:
#   p: --ditron-backend cuda plan lowering properties (copy_engine / sm / tma with poison,
#      ring forwards waiting for their chunk)
#   k: --ditron-backend cuda megakernel graph fuzz first (compile's schedule agreement), then
#      the rest of tests/task
# Run from a `git archive` export of the tree (its commit in COMMIT), with DEADLINE_S set.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
for part in "$@"; do
  if [[ $part != p && $part != k ]]; then
    DEADLINE_S=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) )) \
      bash bench/results/2026-12-06-s65/scripts/run_s65.sh "$part"
    continue
  fi
  O=$OUT/s66$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  P="python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda"
  if [[ $part == p ]]; then
    timeout $l $P tests/plan/test_plan_properties.py tests/plan/test_plan.py -k "lowered" > $O/tests.txt 2>&1
  else
    timeout $l $P tests/task/test_graph_fuzz.py tests/task > $O/tests.txt 2>&1
  fi
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
