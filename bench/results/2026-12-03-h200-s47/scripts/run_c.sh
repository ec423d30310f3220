#!/usr/bin/env bash
# s47c: the all-to-all's row copies in tiles of rows (a2a_device._move_rows): tile variants
# at W = 1 (bench/diag/a2a_copy_lab.py), the MoE layer again (s47a had 1.27 / 1.18 ms per
# call in the old per-row copy kernels at 8192 tokens), then correctness on cuda: the
# device all-to-all and MoE tests, and the pulled GEMM-RS mark test with and without a
# wait timeout (spinning and stream-memop waits).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s47c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python bench/diag/a2a_copy_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
tail -16 $O/lab.txt
timeout 110 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,8192 \
  --profile --out $O/layer.json > $O/layer.txt 2>&1; echo "rc=$?" >> $O/layer.txt
grep -E "^layer|rc=|_data_kernel|_finish_kernel" $O/layer.txt | cut -c1-60,140-175
run() {  # name, timeout, pytest args...
  local name=$1 limit=$2; shift 2
  timeout $limit python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt
  echo "== $name"; grep -E "FAIL|ERROR|passed|failed|rc=" $O/$name.txt | tail -6
}
run a2a 150 --ditron-backend cuda tests/ops/test_collectives.py -k "all_to_all_device" tests/ops/test_moe.py
run marks 60 --ditron-backend cuda tests/ops/test_tp_gemm.py -k starts_spinning
DITRON_WAIT_TIMEOUT=60 run marks_timeout 60 --ditron-backend cuda tests/ops/test_tp_gemm.py -k starts_spinning
