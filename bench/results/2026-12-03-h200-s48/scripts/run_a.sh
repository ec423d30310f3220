#!/usr/bin/env bash
# s48a: session 47's own-rows device all-to-all at W = 2 on cuda (two ranks sharing the GPU)
# with the MoE ops, then the copy lab's single-pass variants (finishing programs per SM,
# tile bytes, warps) for retuning.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s48a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
run() {  # name, timeout, pytest args...
  local name=$1 limit=$2; shift 2
  timeout $limit python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt
  echo "== $name"; grep -E "FAIL|ERROR|passed|failed|rc=" $O/$name.txt | tail -6
}
run a2a 170 --ditron-backend cuda tests/ops/test_collectives.py -k all_to_all_device
run moe 250 --ditron-backend cuda tests/ops/test_moe.py tests/nn/test_moe.py
DITRON_HEAP_SIZE=8G timeout 150 python bench/diag/a2a_copy_lab.py --tokens 8192 \
  --variants 0:0:0:0:0,16384:1024:256:4:4,16384:1024:256:8:4,32768:1024:256:4:8,32768:2048:256:2:8,8192:1024:256:8:4,65536:2048:256:2:16,32768:1024:256:8:8 \
  --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt | tail -12
