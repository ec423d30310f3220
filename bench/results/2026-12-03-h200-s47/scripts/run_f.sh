#!/usr/bin/env bash
# s47f: a rank's rows for itself skip the inbox (the finishing kernel reads them from x: one
# pass, not two; at W = 1 all rows): the device all-to-all on cuda (W = 2 sharing the GPU,
# own and peer rows, CUDA graph), the MoE layer, the copy lab's default variant.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=100
O=$OUT/s47f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 70 python -m pytest -v -p no:cacheprovider tests/ops/test_collectives.py \
  -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph" > $O/a2a.txt 2>&1; echo "rc=$?" >> $O/a2a.txt
grep -E "FAIL|passed|failed|rc=" $O/a2a.txt | tail -4
timeout 80 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 1024,8192 \
  --out $O/layer.json > $O/layer.txt 2>&1; echo "rc=$?" >> $O/layer.txt
grep -E "^layer|rc=" $O/layer.txt
DITRON_HEAP_SIZE=8G timeout 40 python bench/diag/a2a_copy_lab.py --tokens 8192 --variants 0:0:0:0:0 --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=" $O/lab.txt
