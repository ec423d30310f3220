#!/usr/bin/env bash
# s70: GPU checks. Each argument is one pytest argument string (files, -k, -m), run in turn
# under a shared deadline (DEADLINE_S) on the GPU; output to $OUT/s70_<TAG><i>/tests.txt.
# Run from a `git archive` export of the tree (its commit in COMMIT). Arguments starting with
# "cuda:" run with --ditron-backend cuda (the multi-rank tests on the GPU), others as given.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
i=0
for arg in "$@"; do
  i=$((i + 1))
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  if (( l < 5 )); then echo "== $i: skipped, the deadline is spent: $arg"; continue; fi
  O=$OUT/s70_${TAG:-}$i; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; echo "args: $arg"; } > $O/commit.txt
  extra=()
  if [[ $arg == cuda:* ]]; then arg=${arg#cuda:}; extra=(--ditron-backend cuda); fi
  # shellcheck disable=SC2086  # the argument string is split into pytest's arguments
  eval "timeout $l python -m pytest -v -p no:cacheprovider --durations=0 ${extra[*]:-} $arg" \
    > $O/tests.txt 2>&1
  echo "rc=$?" >> $O/tests.txt
  echo "== $i: $arg"; grep -E "FAILED|ERROR|passed|failed|rc=" $O/tests.txt | tail -n 20
done
