#!/usr/bin/env bash
# s56b: run_d's cuda tests of session 54's changes (fp32 tiles, descriptors, megakernel), which
# s56a's chain left unrun, then session 54's gather-tile timing (shrunk_ab.py) and its tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s56b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 200 $T tests/task/test_megakernel.py tests/ops/test_moe.py -k "descriptors or gpu_default or tma_path or wgrad" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt; tail -n 3 $O/tests.txt
timeout 150 $T tests/ops/test_tp_gemm.py -k "ops_match_torch or local_persistent" > $O/tp_tests.txt 2>&1; echo "rc=$?" >> $O/tp_tests.txt; tail -n 3 $O/tp_tests.txt
