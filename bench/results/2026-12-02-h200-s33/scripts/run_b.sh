#!/usr/bin/env bash
# s33b: pipeline depth for 64 tokens (4096, 11008; 4 layers, bf16): Triton's num_stages for
# the whole megakernel at 2, 3, 4 with the tiles each fits in shared memory, num_warps 8 for
# the widest; then GPU scope against system scope on the large layers (16 tokens), as s33a.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33b; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
rm -rf /tmp/base && mkdir -p /tmp/base && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/base
for f in ditron/task/codegen.py ditron/language/signal.py; do git show 8ba47d9:$f > /tmp/base/$f; done
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|Error" $O/runs/$name.txt; } >> $O/summary.txt; }
T=64,4096,11008
mk $PWD st3 $T 120 --stages 3 --blocks 64x128x64x256x4,32x128x128x256x4
mk $PWD st2 $T 150 --stages 2 --blocks 64x128x128x256x4,64x128x128x256x8,64x256x64x256x4,64x128x64x256x4
mk $PWD st4 $T 120 --stages 4 --blocks 64x128x64x256x4,64x64x128x256x4
mk $PWD st2w8 $T 100 --stages 2 --warps 8 --blocks 64x128x128x256x4,64x256x64x256x4
L=16,4096,11008
mk /tmp/base sys_l1 $L 70; mk $PWD gpu_l1 $L 70
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
