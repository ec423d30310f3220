#!/usr/bin/env bash
# s39e: s39d's A/B again with more rounds, untraced first (program order; rows first;
# rows first on the simulated queue) at 256 and 512 tokens, then 256 traced; outputs in
# one tarball (the device returns at most 8 files).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
W=/tmp/s39e; mkdir -p $W
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $W/commit.txt
for T in 256 512; do
  timeout 200 python -m ditron bench megakernel --shape $T,4096,11008 --iters 24 --rounds 4 \
    --blocks 128x128x64x256x4s4w8t1 --queue tasks,tasks+rows,simulated+rows --out $W/mk$T.json > $W/mk$T.txt 2>&1
  grep -E "kernels|batch1|Error" $W/mk$T.txt | head -20
done
timeout 200 python -m ditron bench megakernel --shape 256,4096,11008 --iters 8 --rounds 1 \
  --blocks 128x128x64x256x4s4w8t1 --queue tasks,tasks+rows,simulated+rows --trace $W/tr256 > $W/tr256.txt 2>&1
grep -E "traced|layer3" $W/tr256.txt
mkdir -p $OUT/s39e; tar czf $OUT/s39e/s39e.tar.gz -C /tmp s39e; cp $W/*.txt $OUT/s39e/
