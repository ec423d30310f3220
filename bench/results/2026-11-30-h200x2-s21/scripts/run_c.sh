#!/bin/bash
# s21c: host cost of the eager calls, the committed raw path (base) against the cached
# sites (new), before and after NCCL runs; then the collectives harness and the GPU
# collectives tests on the new code
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21c; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
git diff > /tmp/new.patch
git checkout -q -- ditron
DITRON_HEAP_SIZE=2G timeout 100 python3 bench/results/2026-11-30-h200x2-s21/scripts/host_ab.py 64,96 base > $O/host_base.txt 2>&1; echo "rc=$?" >> $O/host_base.txt
git apply /tmp/new.patch
git status --short >> $O/commit.txt
DITRON_HEAP_SIZE=2G timeout 100 python3 bench/results/2026-11-30-h200x2-s21/scripts/host_ab.py 64,96 new > $O/host_new.txt 2>&1; echo "rc=$?" >> $O/host_new.txt
cat $O/host_base.txt $O/host_new.txt | sort -k3,3 -k4,6 | grep -v "^rc" 
DITRON_HEAP_SIZE=8G timeout 140 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,128M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
grep "busy\|graph" $O/coll.txt | grep "^\[bench\]" | head -80
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_collectives.py > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
