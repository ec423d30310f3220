#!/usr/bin/env bash
# s31c: waits that poll with volatile loads (HEAD) against acquire atomics (commit
# 4736952, extracted to /tmp/base), on the large MLP; programs per rank 132 / 264;
# the signal and timeout tests on the cuda backend with the new waits. One H200, W = 1.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31c; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
rm -rf /tmp/base && mkdir -p /tmp/base && git archive 4736952 | tar -x -C /tmp/base
mk() { root=$1; name=$2; shift 2; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout 100 python bench/megakernel.py --shape 16,4096,11008 --layers 4 --iters 16 --rounds 2 --stages 3 --warps 4 --out $O/runs/$name.json "$@" > $O/runs/$name.txt 2>&1); }
B=16x64x128x256x4,16x128x128x256x4
mk /tmp/base atomic_polls --blocks $B
mk $PWD load_polls --blocks $B
mk $PWD load_polls_p132 --blocks $B --programs 132
mk $PWD load_polls_p264 --blocks $B --programs 264
mk /tmp/base atomic_polls_again --blocks $B
PYTHONPATH=$PWD timeout 170 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/language tests/runtime/test_timeout.py tests/task/test_megakernel.py 2>&1 | tail -6 > $O/cuda_tests.txt
tar czf $O/runs.tar.gz -C $O runs
grep -h "layers:\|batch8\|kernels" $O/runs/*.txt > $O/summary.txt
rm -rf $O/runs
cat $O/summary.txt $O/cuda_tests.txt
