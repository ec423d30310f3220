#!/usr/bin/env bash
# s39c: where the prefill megakernel's time goes: 256 and 128 tokens (hidden 4096, ffn
# 11008, 4 layers, bf16, W = 1) with the default tiles, traced (each item's start, end of
# waits, end of tile, end of notifies on the device clock), next to the untraced timing.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s39c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for T in 256 128; do
  timeout 240 python -m ditron bench megakernel --shape $T,4096,11008 --iters 16 --rounds 2 \
    --blocks 128x128x64x256x4s4w8t1 --trace $O/mk$T --out $O/mk$T.json > $O/mk$T.txt 2>&1
  tail -30 $O/mk$T.txt
done
