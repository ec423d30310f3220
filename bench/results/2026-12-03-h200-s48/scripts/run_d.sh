#!/usr/bin/env bash
# s48d: the combine reads its rows in place (all_to_all_inbox: the peers' rows in the
# inbox, the own ones in y; one gather-sum pass instead of a copy into `back` and the sum):
# correctness on cuda (two ranks sharing the GPU, CUDA graph, the MoE layer at W = 1-4, the
# gather-sum and routing kernels), then the copy lab's combine and the MoE layer vs torch.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s48d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
run() {  # name, timeout, pytest args...
  local name=$1 limit=$2; shift 2
  timeout $limit python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt
  echo "== $name"; grep -E "FAIL|ERROR|passed|failed|rc=" $O/$name.txt | tail -6
}
run a2a 130 --ditron-backend cuda tests/ops/test_collectives.py -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph"
run kernels 60 --ditron-backend cuda tests/kernels/test_gather_sum.py tests/kernels/test_routing.py
run moe 130 --ditron-backend cuda tests/ops/test_moe.py -k "layer_matches or cuda_graph or drops"
DITRON_HEAP_SIZE=8G timeout 50 python bench/diag/a2a_copy_lab.py --tokens 8192,1024 --variants 0:0:0:0:0 \
  --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt | cut -c1-130
timeout 100 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 1024,8192 \
  --out $O/layer.json > $O/layer.txt 2>&1; echo "rc=$?" >> $O/layer.txt
grep -E "^layer|rc=" $O/layer.txt
