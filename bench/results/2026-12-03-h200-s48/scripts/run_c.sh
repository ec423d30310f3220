#!/usr/bin/env bash
# s48c: FINISH_PER_SM = 8 (s48a/b): the device all-to-all on cuda at W = 2 and in a CUDA
# graph, then the MoE layer and the SwiGLU layer against torch at 1024 and 8192 tokens.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s48c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/ops/test_collectives.py \
  -k "all_to_all_device_cuda or all_to_all_device_in_cuda_graph" > $O/a2a.txt 2>&1; echo "rc=$?" >> $O/a2a.txt
grep -E "FAIL|passed|failed|rc=" $O/a2a.txt | tail -4
for v in plain gated; do
  flag=""; [ $v = gated ] && flag=--gated
  timeout 110 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 1024,8192 $flag \
    --out $O/layer_$v.json > $O/layer_$v.txt 2>&1; echo "rc=$?" >> $O/layer_$v.txt
  echo "== $v"; grep -E "^layer|rc=" $O/layer_$v.txt
done
