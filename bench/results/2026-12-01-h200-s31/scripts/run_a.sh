#!/usr/bin/env bash
# s31a: up-tile weight streaming by layout and tile config vs cuBLAS (tile_bw.py); the
# megakernel bench with weights stored [in, out] ('kn', sessions 29-30) and as nn.Linear
# keeps them ('linear'), one H200, world size 1
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
S=bench/results/2026-12-01-h200-s31/scripts
timeout 300 python $S/tile_bw.py --out $O/tile_bw.json > $O/tile_bw.txt 2>&1
for w in kn linear; do
  timeout 70 python bench/megakernel.py --shape 16,1024,2816 --layers 4 --blocks 16x32x64x128x4 --stages 4 --iters 16 --rounds 2 --inline --weights $w --out $O/mk_1024_$w.json > $O/mk_1024_$w.txt 2>&1
  timeout 100 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --blocks 16x32x256x256x4 --stages 4 --warps 8 --iters 16 --rounds 2 --weights $w --out $O/mk_4096_$w.json > $O/mk_4096_$w.txt 2>&1
done
grep -v "^ " $O/tile_bw.txt | head -20; grep "^ " $O/tile_bw.txt; grep -h "layers:\|batch8\|kernels" $O/mk_*.txt
