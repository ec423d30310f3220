#!/usr/bin/env bash
# s65: GPU checks of everything after 57d5145 (session 64's last GPU tree). Parts run in the
# order given; each is bounded by its own timeout and by DEADLINE_S (default 560) for the call:
#   a: -m gpu ditron.nn, collectives (split gathering, pads at the heap's top, exchange epochs)
#   b: -m gpu fused collectives, MoE, out= / replays (raw_pushes pads), megakernel
#   e: -m gpu engines, gather_sum, workspaces, api contract; torch's add_ per dtype on CUDA
#   w: --ditron-backend cuda language + timeout + signals + agreement + task tests
#   w2: the rest of w after its 400 s ran out in the agreement tests (agreement, task, and the
#       sm_90 vector-width compile check, which needs tools/ in the export)
#   t: `ditron bench tp-gemm` with 2 ranks sharing the GPU, quarter shapes, tuned
# Run from a `git archive` export of the tree (its commit in COMMIT).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
end=$(( $(date +%s) + ${DEADLINE_S:-560} ))
left() { local l=$(( end - $(date +%s) )); (( l < $1 )) && echo $l || echo $1; }
for part in "$@"; do
  O=$OUT/s65$part; mkdir -p $O
  { cat COMMIT 2>/dev/null; nvidia-smi -L; } > $O/commit.txt
  P="python -m pytest -v -p no:cacheprovider --durations=0"
  case $part in
    a) timeout $(left 400) $P -m gpu tests/nn tests/ops/test_collectives.py > $O/tests.txt 2>&1 ;;
    b) timeout $(left 450) $P -m gpu tests/ops/test_fused_collectives.py tests/ops/test_moe.py \
          tests/ops/test_out.py tests/task > $O/tests.txt 2>&1 ;;
    e) { python bench/results/2026-12-06-h100-s64/scripts/torch_adds.py cuda  # s65 ran a copy of it
         timeout $(left 300) $P -m gpu tests/engines tests/kernels/test_gather_sum.py \
          tests/ops/test_workspaces.py tests/test_api_contract.py
       } > $O/tests.txt 2>&1 ;;
    w) timeout $(left 400) $P --ditron-backend cuda tests/language tests/runtime/test_timeout.py \
          tests/runtime/test_signals.py tests/runtime/test_agreement.py tests/task > $O/tests.txt 2>&1 ;;
    w2) timeout $(left 400) $P --ditron-backend cuda tests/runtime/test_agreement.py tests/task \
          tests/language/test_vectorized_remote_access.py > $O/tests.txt 2>&1 ;;
    t) DITRON_CACHE_DIR=$O/cache timeout $(left 300) python -m ditron bench tp-gemm --world-size 2 \
          --scale 0.25 --tune --out $O > $O/tests.txt 2>&1 ;;
    *) echo "part must be a, b, e, w, w2 or t" >&2; exit 2 ;;
  esac
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
