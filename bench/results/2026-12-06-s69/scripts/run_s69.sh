#!/usr/bin/env bash
# s69: GPU checks session 68 could not finish, and session 69's changes. Older parts are handed
# on to ../../2026-12-06-s68/scripts/run_s68.sh; new here:
#   l: under --ditron-backend cuda the launch, groups and op-sequence tests (part r of s68 ran
#      out of its deadline before them)
#   n: session 69's fixes under --ditron-backend cuda (files in FILES_N, selected by K_N) and
#      -m gpu (files in GPU_N)
# Run from a `git archive` export of the tree (its commit in COMMIT), with DEADLINE_S set.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
for part in "$@"; do
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  if [[ $part != l && $part != n ]]; then
    DEADLINE_S=$l bash bench/results/2026-12-06-s68/scripts/run_s68.sh "$part"
    continue
  fi
  O=$OUT/s69$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  P="python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda"
  if [[ $part == l ]]; then
    timeout $l $P ${FILES_L:-tests/runtime/test_launch.py tests/runtime/test_groups.py \
      tests/ops/test_op_sequences.py} > $O/tests.txt 2>&1
  else
    { timeout $l $P ${FILES_N:-} ${K_N:+-k "$K_N"}
      l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
      timeout $l python -m pytest -v -p no:cacheprovider --durations=0 -m gpu ${GPU_N:-tests/ops}
    } > $O/tests.txt 2>&1
  fi
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
