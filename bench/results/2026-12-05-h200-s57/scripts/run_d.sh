#!/usr/bin/env bash
# s57d: on cuda, the agreement tests and the TP ops' tuned decisions per mode (session 56
# added the tile agreement to the TP ops and the slowdown terms to the cost model).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s57d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 250 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/runtime/test_agreement.py "tests/ops/test_tp_gemm.py::test_tuned_decisions_per_mode" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/tests.txt | tail -n 30
