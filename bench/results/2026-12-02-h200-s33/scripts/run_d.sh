#!/usr/bin/env bash
# s33d: MlpBlocks.stages (the GEMM loops' pipeline depth, per task) and the tuner trying it
# (the working tree), one H200: cuda-backend tests of the tuner and the megakernel MLPs;
# 64 tokens with stages 4 per loop against the default depth and against num_stages=4 for
# the whole kernel; then the tuner for 16 and 64 tokens (4096, 11008; 4 layers, bf16, W = 1).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
PYTHONPATH=$PWD timeout 120 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_mlp_tuner.py 2>&1 | tail -3 > $O/cuda_tests.txt
PYTHONPATH=$PWD timeout 100 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py -k "stack_gpu or bf16 or matmul_tile" 2>&1 | tail -3 >> $O/cuda_tests.txt
cat $O/cuda_tests.txt
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "tuner chose\|batch8\|kernels\|Error" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
T=64,4096,11008; L=16,4096,11008
mk $PWD t64_loop $T 90 --blocks 64x128x64x256x4s4,64x128x64x256x4
mk $PWD t64_kernel $T 70 --stages 4 --blocks 64x128x64x256x4
mk $PWD tune16 $L 100 --tune
mk $PWD tune64 $T 260 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
