#!/usr/bin/env bash
# s63: after session 63's audits (plans, kernels, engines, tuner, agreement), the tests of
# the changed layers with --ditron-backend cuda (two ranks sharing the GPU) and the
# GPU-marked tests. Parts run in the order given, each bounded by its own timeout:
#   bash run_s63.sh k g1   # then: bash run_s63.sh g2
#   k:  kernels, plan, engines, agreement with --ditron-backend cuda
#   g1: -m gpu engines and TP GEMMs (~140 s)
#   g2: -m gpu ditron.nn, collectives, fused collectives, MoE, out=, megakernel (~330 s)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for part in "$@"; do
  case $part in
    k) args="--ditron-backend cuda tests/kernels tests/plan tests/engines tests/runtime/test_agreement.py"; limit=330 ;;
    g1) args="-m gpu tests/engines tests/ops/test_tp_gemm.py"; limit=230 ;;
    g2) args="-m gpu tests/nn tests/ops/test_collectives.py tests/ops/test_fused_collectives.py tests/ops/test_moe.py tests/ops/test_out.py tests/task"; limit=540 ;;
    *) echo "part must be k, g1 or g2" >&2; exit 2 ;;
  esac
  O=$OUT/s63$part; mkdir -p $O
  { git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
  timeout $limit python -m pytest -v -p no:cacheprovider --durations=0 $args > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=" $O/tests.txt | tail -n 30
done
