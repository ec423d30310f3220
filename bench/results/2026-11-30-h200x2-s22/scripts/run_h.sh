#!/bin/bash
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s22h; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
timeout 100 python3 -m pytest -q -m gpu tests/ops/test_out.py > $O/gpu_tests_out.txt 2>&1; echo "rc=$?" >> $O/gpu_tests_out.txt
tail -3 $O/gpu_tests_out.txt
DITRON_HEAP_SIZE=4G timeout 120 python3 bench/results/2026-11-30-h200x2-s22/scripts/out_ab.py 64,96,128,256 > $O/out_ab.txt 2>&1; echo "rc=$?" >> $O/out_ab.txt
grep -v "^check.*ok" $O/out_ab.txt | tail -30
timeout 200 python3 -m ditron bench collectives --world-size 2 --ops all_gather,reduce_scatter --engines copy_engine,sm --sizes 64M,96M,128M,256M,512M,1G --graphs --graph-max 1G --busy --out $O/coll > $O/coll.txt 2>&1; echo "rc=$?" >> $O/coll.txt
grep "busy" $O/coll.txt | grep "^\[bench\]" | grep -v " sm" | awk '{print $2,$3,$4,$5,$6,$7}' | head -80
tail -1 $O/coll.txt
