#!/usr/bin/env bash
# s53f: s53d's combine host script at this tree and at 44ec15d in turns, this tree first
# (s53d ran the old first: is the alone / back-to-back gap the order or the code?).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53f; mkdir -p $O
S=$PWD/bench/results/2026-12-04-h200-s53/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
git worktree add -f /tmp/old49 44ec15d > /dev/null 2>&1 || git clone -q . /tmp/old49 && (cd /tmp/old49 && git checkout -q 44ec15d)
for i in 1 2; do
  for tree in $PWD /tmp/old49; do
    tag=$( [ $tree = $PWD ] && echo new || echo old )
    (cd $tree && PYTHONPATH=$tree timeout 70 python $S/combine_host.py) > $O/host_${tag}_$i.txt 2>&1
    echo "== host $tag $i"; grep -E "^combine|^dispatch|Error" $O/host_${tag}_$i.txt
  done
done
