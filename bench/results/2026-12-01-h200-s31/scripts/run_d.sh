#!/usr/bin/env bash
# s31d: the wait tests on the cuda backend (volatile-load polls), then the large MLP with
# waits polling by volatile loads (the working tree) and by acquire atomics (/tmp/base: the
# same tree with signal.py of f29e4f0), alternating twice. One H200, W = 1.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31d; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
PYTHONPATH=$PWD timeout 230 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/runtime/test_timeout.py tests/language/test_primitives.py tests/task/test_megakernel.py -k "timeout or wait or ring or mlp" 2>&1 | tail -6 > $O/cuda_tests.txt
rm -rf /tmp/base && mkdir -p /tmp/base && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/base
git show f29e4f0:ditron/language/signal.py > /tmp/base/ditron/language/signal.py
mk() { root=$1; name=$2; shift 2; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout 100 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --iters 16 --rounds 2 --stages 3 --warps 4 --blocks 16x64x128x256x4,16x128x128x256x4 --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); }
mk /tmp/base atomic_1; mk $PWD load_1; mk /tmp/base atomic_2; mk $PWD load_2
tar czf $O/runs.tar.gz -C $O runs
for f in $O/runs/*.txt; do echo "== $(basename $f)"; grep -h "batch8\|kernels" $f; done > $O/summary.txt
rm -rf $O/runs
cat $O/cuda_tests.txt $O/summary.txt
