#!/bin/bash
# s21e: on the committed code, the collectives harness twice (run-to-run spread of the eager
# rows) around every GPU test
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s21e; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
for r in 1 2; do
DITRON_HEAP_SIZE=8G timeout 130 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,128M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll$r > $O/coll$r.txt 2>&1; echo "rc=$?" >> $O/coll$r.txt
grep "busy\|graph" $O/coll$r.txt | grep "^\[bench\]" | awk '{print $2,$3,$4,$5,$6,$7}' | head -80
if [ $r = 1 ]; then
timeout 320 python3 -m pytest -q -m gpu tests/ > $O/gpu_tests.txt 2>&1; echo "rc=$?" >> $O/gpu_tests.txt
tail -3 $O/gpu_tests.txt
fi
done
