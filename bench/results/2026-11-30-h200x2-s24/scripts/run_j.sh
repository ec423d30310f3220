#!/bin/bash
# s24j: rehearsal of issue 5's full-node script on one H200 (two ranks share it), quick
# sizes, steps 1-4 under a 150 s budget; its output folder tarred into one file
mkdir -p $OUT/s24j
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $OUT/s24j/commit.txt
OUT_NODE=/tmp/node
OUT=$OUT_NODE QUICK=1 STEPS="1 2 3 4" BUDGET=150 bash bench/gpu_node_run.sh > /tmp/console.txt 2>&1
echo "rc=$?" >> /tmp/console.txt
cp /tmp/console.txt $OUT/s24j/console.txt
tar czf $OUT/s24j/node.tgz -C /tmp node
tail -40 /tmp/console.txt
