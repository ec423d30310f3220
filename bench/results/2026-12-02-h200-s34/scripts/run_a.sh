#!/usr/bin/env bash
# s34a: every GPU-marked test on main (02f9820); the L2 prefetch lab; the MLP tuner at 128
# tokens (4096, 11008; 4 layers, bf16, W = 1).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=bench/results/2026-12-02-h200-s34/scripts
O=$OUT/s34a; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
for p in "22 262144" "22 1048576" "88 262144" "132 65536"; do timeout 60 python $S/pf_lab.py $p; done > $O/pf_lab.txt 2>&1
cat $O/pf_lab.txt
PYTHONPATH=$PWD timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -15 > $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
(DITRON_CACHE_DIR=/tmp/cache_t128 timeout 230 python bench/megakernel.py --shape 128,4096,11008 --iters 16 --rounds 2 --tune --out $O/runs/tune128.json > $O/runs/tune128.txt 2>&1)
grep -h "tuner chose\|batch8\|kernels\|Error\|<-" $O/runs/tune128.txt | grep -v _graph_ > $O/summary.txt
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
