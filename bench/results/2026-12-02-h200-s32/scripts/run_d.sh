#!/usr/bin/env bash
# s32d: the megakernel's notifies to its own rank at GPU scope (the working tree) against
# system scope (/tmp/base: the working tree with codegen.py of 7da6bc7), one process per
# run, alternating; then the MLP tuner for 64 tokens with block_m 16, 32 and 64. One H200,
# W = 1, MlpBlocks() defaults.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s32d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
rm -rf /tmp/base && mkdir -p /tmp/base && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/base
git show 7da6bc7:ditron/task/codegen.py > /tmp/base/ditron/task/codegen.py
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "tune\]\|tuner\|batch8\|kernels\|Error" $O/runs/$name.txt | tr '\r' '\n' | grep -v "build [0-9]"; } >> $O/summary.txt; }
S=16,1024,2816; L=16,4096,11008
mk /tmp/base sys_s1 $S 70; mk $PWD gpu_s1 $S 70; mk /tmp/base sys_s2 $S 70; mk $PWD gpu_s2 $S 70
mk /tmp/base sys_l1 $L 70; mk $PWD gpu_l1 $L 70
mk $PWD tune64 64,4096,11008 200 --tune
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
