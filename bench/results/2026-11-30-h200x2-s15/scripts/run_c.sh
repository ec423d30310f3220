#!/bin/bash
# s15c: the TP-GEMM GPU tests (captured graph with early_rows; engines eagerly and
# graph-safe on the cuda backend, 2 ranks), then the tuned GEMM-RS benchmark, all six shapes.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
D=$OUT/s15c; mkdir -p $D
git rev-parse --short HEAD > $D/commit.txt; git status --short >> $D/commit.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_tp_gemm.py > $D/gpu_tests.txt 2>&1
echo "pytest rc=$?" >> $D/gpu_tests.txt; tail -2 $D/gpu_tests.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "engines_agree_with_torch[2] or graph_safe_variants_match_torch[2] or per_mode" > $D/cuda_backend_tests.txt 2>&1
echo "pytest rc=$?" >> $D/cuda_backend_tests.txt; tail -2 $D/cuda_backend_tests.txt
export DITRON_CACHE_DIR=$D/cache
timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --tune --graphs \
  --out $D/tp_rs > $D/tp_rs.txt 2> $D/tp_rs.err
echo "bench rc=$?" >> $D/tp_rs.txt
grep -v "^\s*$" $D/tp_rs.txt | tail -24
grep -E "early|confirmed|under CUDA graphs ->" $D/tp_rs.err | tail -30
