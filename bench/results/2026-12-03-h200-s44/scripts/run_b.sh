#!/usr/bin/env bash
# s44b: the grouped GEMM's TMA load path: GPU tests (both weight layouts, every method), then
# REFERENCES.md's MoE GEMM shapes with the tile sweep (TMA and pointer loads, torch's
# _grouped_mm in the same run); then the compile test with CUDA traced under inductor.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s44b; mkdir -p $O
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_moe.py \
  -k "grouped_gemm" > $O/grouped_tests.txt 2>&1
echo "rc=$?" >> $O/grouped_tests.txt; grep -E "PASS|FAIL|passed|failed|rc=" $O/grouped_tests.txt | tail -8
timeout 300 python -m ditron bench moe --world-size 1 --parts gemm --sweep --out $O/gemm_sweep.json \
  > $O/gemm_sweep.txt 2>&1
echo "rc=$?" >> $O/gemm_sweep.txt; tail -8 $O/gemm_sweep.txt
timeout 150 python -c "
import ditron
from tests.nn.test_moe import check_compile
print(ditron.launch(check_compile, 2, 'inductor', False, ('cpu', 'cuda'), backend='cuda'))
" > $O/traced_inductor.txt 2>&1
echo "rc=$?" >> $O/traced_inductor.txt; tail -5 $O/traced_inductor.txt
