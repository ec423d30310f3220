#!/usr/bin/env bash
# s67: GPU checks of session 66's changes and of session 67's audit fixes. Parts a, b, e, w,
# w2, t are session 65's (../../2026-12-06-s65/scripts/run_s65.sh), p and k session 66's
# (../../2026-12-06-s66/scripts/run_s66.sh); new here:
#   f: --ditron-backend cuda megakernel graph fuzz's invalid-graph cases (session 66 ran
#      out of device time before `outside` and `past_end`)
#   g: --ditron-backend cuda tp_gemm ops + kernels tests (session 67's audits)
# Run from a `git archive` export of the tree (its commit in COMMIT), with DEADLINE_S set.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
for part in "$@"; do
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  if [[ $part != f && $part != g ]]; then
    DEADLINE_S=$l bash bench/results/2026-12-06-s66/scripts/run_s66.sh "$part"
    continue
  fi
  O=$OUT/s67$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  P="python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda"
  if [[ $part == f ]]; then
    timeout $l $P tests/task/test_graph_fuzz.py -k invalid > $O/tests.txt 2>&1
  else
    timeout $l $P tests/ops/test_tp_gemm*.py tests/kernels > $O/tests.txt 2>&1
  fi
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
