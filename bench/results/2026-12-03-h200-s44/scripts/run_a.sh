#!/usr/bin/env bash
# s44a: ditron.nn's MoE in its registered-autograd form on the GPU (never ran there):
# (1) the tests as committed (CUDA graph-breaks under torch.compile), (2) each function
# compiled with CUDA traced too (bench/diag/nn_moe_compile_parts.py ... trace-all),
# (3) the compile test with CUDA traced, aot_eager with opcheck (inductor: run_b.sh).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s44a; mkdir -p $O
git log --oneline -1 > $O/commit.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $O/commit.txt
timeout 200 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/nn/test_moe.py > $O/nn_moe.txt 2>&1
echo "rc=$?" >> $O/nn_moe.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=|AssertionError: rank" $O/nn_moe.txt | tail -16
timeout 130 python bench/diag/nn_moe_compile_parts.py cuda 1,2 eager,aot_eager trace-all > $O/parts.txt 2>&1
echo "rc=$?" >> $O/parts.txt; tail -30 $O/parts.txt
for comp in aot_eager; do
  timeout 130 python -c "
import ditron
from tests.nn.test_moe import check_compile
print(ditron.launch(check_compile, 2, '$comp', '$comp' == 'aot_eager', ('cpu', 'cuda'), backend='cuda'))
" > $O/traced_$comp.txt 2>&1
  echo "rc=$?" >> $O/traced_$comp.txt; tail -5 $O/traced_$comp.txt
done
