#!/usr/bin/env bash
# s37b/s37c: every GPU-marked test after session 36's mode changes (ops under no_grad,
# inference-mode-safe state, host tables on the CPU), with the new CUDA-graph cases under
# torch.inference_mode; s37b also the docs/tp_gemm.md example on the cuda backend after its
# fix. Ranks share the H200. Usage: run_b.sh ops|rest
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
if [ "$1" = ops ]; then O=$OUT/s37b; else O=$OUT/s37c; fi
mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
if [ "$1" = ops ]; then
  timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
    tests/ops/test_docs_example.py > $O/docs_example.txt 2>&1; echo "rc=$?" >> $O/docs_example.txt
  tail -6 $O/docs_example.txt
  timeout 420 python -m pytest -v -p no:cacheprovider -m gpu --durations=10 tests/ops \
    > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
else
  timeout 540 python -m pytest -v -p no:cacheprovider -m gpu --durations=10 \
    tests/engines tests/nn tests/task tests/runtime tests/language tests/kernels \
    > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
fi
grep -c PASSED $O/gpu_tests.txt; grep "FAILED\|ERROR" $O/gpu_tests.txt | head; tail -16 $O/gpu_tests.txt
