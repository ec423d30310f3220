#!/usr/bin/env bash
# s32b: the cuda-backend runs of the new task tests (MLP tuner, baked ints); then one
# process per run, alternating: the megakernel with the launch of 7da6bc7 (tensors passed
# to Triton's launcher as tensors: /tmp/base, the working tree with triton_launch.py of
# 7da6bc7) against the working tree (tensors passed as their addresses), and the working
# tree with --bake-ints. One H200, W = 1, MlpBlocks() defaults.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s32b; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
PYTHONPATH=$PWD timeout 180 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_mlp_tuner.py tests/task/test_megakernel.py -k "baked or tuned or refuses or stack_matches" 2>&1 | tail -4 > $O/cuda_tests.txt
rm -rf /tmp/base && mkdir -p /tmp/base && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/base
git show 7da6bc7:ditron/runtime/triton_launch.py > /tmp/base/ditron/runtime/triton_launch.py
mk() { root=$1; name=$2; shape=$3; shift 3; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout 80 python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|host\|Error" $O/runs/$name.txt; } >> $O/summary.txt; }
S=16,1024,2816; L=16,4096,11008
mk /tmp/base base_s1 $S; mk $PWD addr_s1 $S; mk $PWD baked_s1 $S --bake-ints
mk /tmp/base base_s2 $S; mk $PWD addr_s2 $S; mk $PWD baked_s2 $S --bake-ints
mk $PWD addr_l1 $L; mk $PWD baked_l1 $L --bake-ints
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/cuda_tests.txt $O/summary.txt
