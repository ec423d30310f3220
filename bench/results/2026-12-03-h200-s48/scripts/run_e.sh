#!/usr/bin/env bash
# s48e: after the in-place combine (s48d): the SwiGLU layer vs torch, and the plain layer's
# kernel profile at 8192 tokens.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s48e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 110 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 1024,8192 --gated \
  --out $O/gated.json > $O/gated.txt 2>&1; echo "rc=$?" >> $O/gated.txt
grep -E "^layer|rc=" $O/gated.txt
timeout 110 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 8192 --profile \
  --out $O/profile.json > $O/profile.txt 2>&1; echo "rc=$?" >> $O/profile.txt
grep -E "^layer|rc=" $O/profile.txt; grep -iE "kernel|gemm|gather|finish|data" $O/profile.txt | head -14 | cut -c1-150
