#!/bin/bash
# s13h: the host-path commit against its parent, eagerly, in alternating processes
# (old, new, old, new), GEMM-RS and AG-GEMM on the two smallest shapes of each, with
# s12c's tuned GEMM-RS decisions (AG-GEMM: the cost model's choice).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s13h; mkdir -p $R/cache
OLD=/tmp/ditron-6df67ce; mkdir -p $OLD && git archive 6df67ce ditron | tar -x -C $OLD
cp bench/results/2026-11-30-h200x2-s12/s12c/cache/tune.json $R/cache/
git log -1 --format=%H > $R/commit.txt; git status --short >> $R/commit.txt
for round in 1 2; do
  for code in old new; do
    if [ $code = old ]; then P=$OLD; else P=$PWD; fi
    (cd $P && PYTHONPATH=$P python3 -c "import ditron; print(ditron.__file__)" && PYTHONPATH=$P DITRON_CACHE_DIR=$R/cache timeout 130 python3 -m ditron bench \
      tp-gemm --world-size 2 --ops ag,rs --shapes 11008x4096,14336x4096,4096x11008,3584x14336 \
      --out $R/$code$round > $R/${code}_$round.txt 2>&1)
    echo "$code $round rc=$?"; grep "^gemm_rs\|^ag_gemm" $R/${code}_$round.txt
  done
done
