#!/usr/bin/env bash
# s33c: the two megakernel tests s33a's time limit cut (cuda backend), then deeper pipelines
# (Triton's num_stages for the whole megakernel) for 64 and 16 tokens, 4 layers, bf16, W = 1,
# with the tiles each depth fits in shared memory. The working tree (GPU-scope own notifies).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33c; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
PYTHONPATH=$PWD timeout 150 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py -k "cuda_graph or simulated" 2>&1 | tail -5 > $O/cuda_tests.txt
cat $O/cuda_tests.txt
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|Error" $O/runs/$name.txt | grep -v _graph_; } >> $O/summary.txt; }
T=64,4096,11008; L=16,4096,11008; S=16,1024,2816
mk $PWD t64_st4 $T 100 --stages 4 --blocks 64x128x64x256x4,64x128x64x256x8,64x64x64x256x4
mk $PWD t64_st5 $T 100 --stages 5 --blocks 64x128x64x256x4,64x64x128x256x4
mk $PWD t64_st6 $T 80 --stages 6 --blocks 64x64x64x256x4
mk $PWD l_st3 $L 80 --stages 3 --blocks 16x128x128x256x4,16x128x64x256x4
mk $PWD l_st4 $L 80 --stages 4 --blocks 16x128x64x256x4,16x64x128x256x4
mk $PWD l_st6 $L 80 --stages 6 --blocks 16x128x64x256x4
mk $PWD s_st4 $S 80 --stages 4 --blocks 16x128x64x256x4,16x64x128x256x4
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
