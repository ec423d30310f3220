#!/usr/bin/env bash
# s53d: the combine lab's ops at 1024 tokens took 2x s49b's time in s53c: the lab and the
# combine's host time at 44ec15d (s49b's code, a git worktree) and at this tree, in turns.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53d; mkdir -p $O
S=$PWD/bench/results/2026-12-04-h200-s53/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
git worktree add -f /tmp/old49 44ec15d > /dev/null 2>&1 || git clone -q . /tmp/old49 && (cd /tmp/old49 && git checkout -q 44ec15d)
for i in 1 2; do
  for tree in /tmp/old49 $PWD; do
    tag=$( [ $tree = $PWD ] && echo new || echo old )
    (cd $tree && PYTHONPATH=$tree timeout 100 python bench/diag/moe_combine_lab.py --tokens 1024 --warmup 5 --iters 30) > $O/lab_${tag}_$i.txt 2>&1
    echo "== lab $tag $i"; grep -E "^T|ops alone|Error" $O/lab_${tag}_$i.txt
  done
done
for tree in /tmp/old49 $PWD; do
  tag=$( [ $tree = $PWD ] && echo new || echo old )
  (cd $tree && PYTHONPATH=$tree timeout 100 python $S/combine_host.py) > $O/host_$tag.txt 2>&1
  echo "== host $tag"; grep -E "^combine|^dispatch|Error" $O/host_$tag.txt
done
