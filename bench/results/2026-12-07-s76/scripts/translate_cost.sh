#!/usr/bin/env bash
# The SM engine's copies before and after a2b7e68 (translate reads a peer's heap base under a
# mask): two ranks sharing one GPU, `bench collectives --engines sm`, the trees alternated
# (new, old, new, old). Needs old/ditron = `git archive a2b7e68^ ditron`. Outputs under
# $OUT/translate_cost/<tree>_<i>.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args="--world-size 2 --sizes 256K,4M,64M --ops all_gather,all_reduce --engines sm --warmup 10 --iters 50"
for i in 1 2; do
  for tree in new old; do
    root=$PWD; [ $tree = old ] && root=$PWD/old
    echo "== $tree $i ($(cd $root && python -c 'import ditron; print(ditron.__file__)'))"
    (cd $root && PYTHONPATH=$root timeout ${CAP_S:-80} python -m ditron bench collectives $args \
      --out $OUT/translate_cost/${tree}_$i 2>&1 | grep -vE "^\[bench\]" | tail -16)
  done
done
