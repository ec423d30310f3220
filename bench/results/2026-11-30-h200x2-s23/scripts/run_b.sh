#!/bin/bash
# s23b: the tma AG-GEMM engine on 2 GPUs: tests on the cuda backend, then the A/B lab
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s23b; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 280 python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda \
  "tests/ops/test_tp_gemm.py::test_tp_gemm_engines_agree_with_torch[2]" \
  "tests/ops/test_tp_gemm.py::test_graph_safe_variants_match_torch[2]" \
  > $O/tests_cuda.txt 2>&1
echo "rc=$?" >> $O/tests_cuda.txt
tail -4 $O/tests_cuda.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engines/test_engines.py > $O/tests_engines_gpu.txt 2>&1
echo "rc=$?" >> $O/tests_engines_gpu.txt
tail -4 $O/tests_engines_gpu.txt
timeout 280 python3 scripts/ag_tma_lab.py > $O/ag_tma_lab.txt 2>&1
echo "rc=$?" >> $O/ag_tma_lab.txt
cat $O/ag_tma_lab.txt | tail -30
