#!/usr/bin/env bash
# s67: GPU checks of session 66's changes and of session 67's audit fixes. Parts a, b, e, w,
# w2, t are session 65's (../../2026-12-06-s65/scripts/run_s65.sh), p and k session 66's
# (../../2026-12-06-s66/scripts/run_s66.sh); new here:
#   f: --ditron-backend cuda megakernel graph fuzz's invalid-graph cases (session 66 ran
#      out of device time before `outside` and `past_end`)
#   g: session 67's audit fixes: -m gpu kernels (int64 offsets on a 4 GiB store), and under
#      --ditron-backend cuda the tp_gemm fuzz and argument checks, the device all-to-all's
#      cut splits and one-rank refusals, the pad eviction, the heap, shutdown as a host row
#   c: the tp_gemm ops' bounded metadata cache: -m gpu tests/ops/test_tp_gemm.py (CUDA graph
#      captures) and, under --ditron-backend cuda, the cache, graph-safe and tuned-decision
#      tests
#   m: `ditron bench moe --parts gemm,wgrad` (grouped GEMMs' int64 offsets: timing)
# Run from a `git archive` export of the tree (its commit in COMMIT), with DEADLINE_S set.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
for part in "$@"; do
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  if [[ $part != f && $part != g && $part != m && $part != c ]]; then
    DEADLINE_S=$l bash bench/results/2026-12-06-s66/scripts/run_s66.sh "$part"
    continue
  fi
  O=$OUT/s67$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  P="python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda"
  if [[ $part == f ]]; then
    timeout $l $P tests/task/test_graph_fuzz.py -k invalid > $O/tests.txt 2>&1
  elif [[ $part == g ]]; then
    { timeout $l python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/kernels
      l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
      timeout $l $P tests/ops/test_tp_gemm_fuzz.py tests/ops/test_moe.py \
        tests/ops/test_tp_gemm.py tests/ops/test_workspaces.py tests/runtime/test_heap.py \
        tests/runtime/test_launch_failures.py -k "fuzz or cuts_bad_splits or \
        bad_argument_on_one_rank or bad_config or pad_that_finds or test_heap or \
        allocating_while"
    } > $O/tests.txt 2>&1
  elif [[ $part == c ]]; then
    { timeout $l python -m pytest -v -p no:cacheprovider --durations=0 -m gpu \
        tests/ops/test_tp_gemm.py
      l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
      timeout $l $P tests/ops/test_tp_gemm.py -k "metadata_cache or graph_safe_variants or \
        tuned_decisions_per_mode"
    } > $O/tests.txt 2>&1
  else
    timeout $l python -m ditron bench moe --parts gemm,wgrad --out $O/moe.json > $O/tests.txt 2>&1
  fi
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
