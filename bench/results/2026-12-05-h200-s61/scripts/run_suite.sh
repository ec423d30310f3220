#!/usr/bin/env bash
# s61: the GPU-marked tests after sessions 58-60 (settings parsing, tile-config checks, CLI, tune-cache lock).
#   bash run_suite.sh b   # engines, ditron.nn, collectives (~400 s)
#   bash run_suite.sh c   # fused collectives, MoE, out=, TP GEMMs, megakernel (~240 s)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=$1
case $part in
  b) files="tests/engines tests/nn tests/ops/test_collectives.py" ;;
  c) files="tests/ops/test_fused_collectives.py tests/ops/test_moe.py tests/ops/test_out.py tests/ops/test_tp_gemm.py tests/task" ;;
  *) echo "part must be b or c" >&2; exit 2 ;;
esac
O=$OUT/s61$part; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 560 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu $files > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/gpu_tests.txt | tail -n 30
