#!/usr/bin/env bash
# s68: GPU checks of what session 67 changed and could not run on a GPU. Parts a, b, e, w, w2,
# t, p, k, f, g, m, c are earlier sessions' (../../2026-12-06-s67/scripts/run_s67.sh, which
# hands the older ones on); new here:
#   x: the collectives under --ditron-backend cuda: the in-place max / min reduce_scatter on
#      3+ ranks, the refusal of an `out` overlapping `x`, and the collectives' property fuzz
#   r: session 68's runtime / language / engine-sync fixes: -m gpu tests/language,
#      tests/engines, tests/runtime; under --ditron-backend cuda the signals, timeout,
#      language, launch and groups tests, and the collectives' and TP GEMMs' two-rank tests
# Run from a `git archive` export of the tree (its commit in COMMIT), with DEADLINE_S set.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
for part in "$@"; do
  l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
  if [[ $part != x && $part != r ]]; then
    DEADLINE_S=$l bash bench/results/2026-12-06-s67/scripts/run_s67.sh "$part"
    continue
  fi
  O=$OUT/s68$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  P="python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda"
  if [[ $part == x ]]; then
    timeout $l $P tests/ops/test_collectives_fuzz.py tests/ops/test_collectives.py \
      -k "fuzz or in_place_reduce_scatter_max_min or overlapping_out_refused" > $O/tests.txt 2>&1
  else
    { timeout $l python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/language \
        tests/engines tests/runtime
      l=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) ))
      timeout $l $P tests/runtime/test_signals.py tests/runtime/test_timeout.py tests/language \
        tests/runtime/test_launch.py tests/runtime/test_groups.py tests/ops/test_op_sequences.py
    } > $O/tests.txt 2>&1
  fi
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
