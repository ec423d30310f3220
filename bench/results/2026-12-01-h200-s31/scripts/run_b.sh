#!/usr/bin/env bash
# s31b: the megakernel with the one-loop SwiGLU tile (tiles._dot_pair) and nn.Linear-stored
# weights, by tile config, num_stages and num_warps; one H200, world size 1. Outputs are
# packed in one archive (a call returns 8 files).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31b; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
mk() { name=$1; shift; timeout 110 python bench/megakernel.py --layers 4 --iters 16 --rounds 2 --out $O/runs/$name.json "$@" > $O/runs/$name.txt 2>&1; }
mk big_w8_base --shape 16,4096,11008 --blocks 16x32x256x256x4 --stages 4 --warps 8
mk big_w4_st3 --shape 16,4096,11008 --blocks 16x64x128x256x4,16x128x128x256x4 --stages 3 --warps 4 --trace $O/runs/tr_big
mk big_w8_st3 --shape 16,4096,11008 --blocks 16x64x128x256x4,16x128x128x256x4 --stages 3 --warps 8
mk small_base --shape 16,1024,2816 --blocks 16x32x64x128x4 --stages 4 --inline
mk small_st3 --shape 16,1024,2816 --blocks 16x32x64x128x4,16x64x128x128x4 --stages 3 --inline
rm -f $O/runs/*.png
tar czf $O/runs.tar.gz -C $O runs
grep -h "layers:\|batch8\|kernels\|traced\|tiles " $O/runs/*.txt > $O/summary.txt
rm -rf $O/runs
cat $O/summary.txt
