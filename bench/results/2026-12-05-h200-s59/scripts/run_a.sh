#!/usr/bin/env bash
# s59a: session 58's prepared A/B and cuda tests (run_a.sh of 2026-12-05-cpu-s58), then
# session 59's runtime changes on cuda: peer views of freed buffers, the unguarded-launch
# error, a rank killed by a signal, AG-GEMM on simulated nodes (4 and 3 ranks on one GPU).
set -u
bash bench/results/2026-12-05-cpu-s58/scripts/run_a.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s59a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 240 $T tests/runtime/test_heap.py tests/runtime/test_launch.py tests/ops/test_tp_gemm.py -k "free_and_reuse or unguarded or signal or crashed or simulated" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt; tail -n 3 $O/tests.txt
