#!/usr/bin/env bash
# s63: after session 63's audits (plans, kernels, engines, tuner, agreement), the tests of
# the changed layers with --ditron-backend cuda (two ranks sharing the GPU) and the
# GPU-marked tests.
#   bash run_s63.sh k   # kernels, plan, engines, tune, agreement, MLP tuner on cuda (~300 s)
#   bash run_s63.sh c   # -m gpu: fused collectives, MoE, out=, TP GEMMs, megakernel (~240 s)
#   bash run_s63.sh b   # -m gpu: engines, ditron.nn, collectives (~280 s)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=$1
case $part in
  k) args="--ditron-backend cuda tests/kernels tests/plan tests/engines tests/tune
           tests/runtime/test_agreement.py tests/task/test_mlp_tuner.py" ;;
  b) args="-m gpu tests/engines tests/nn tests/ops/test_collectives.py" ;;
  c) args="-m gpu tests/ops/test_fused_collectives.py tests/ops/test_moe.py tests/ops/test_out.py tests/ops/test_tp_gemm.py tests/task" ;;
  *) echo "part must be k, b or c" >&2; exit 2 ;;
esac
O=$OUT/s63$part; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 570 python -m pytest -v -p no:cacheprovider --durations=0 $args > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/tests.txt | tail -n 40
