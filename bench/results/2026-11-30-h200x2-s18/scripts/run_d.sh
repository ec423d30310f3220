#!/bin/bash
# s18d: GPU timelines (torch.profiler) of the copy-engine all-gather by pushes and by pulls
# and of the reduce-scatter, at 1 GB and 256 MB
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_HEAP_SIZE=8G
O=$OUT/s18d; mkdir -p $O
for s in 1073741824 268435456; do
  timeout 120 python3 bench/results/2026-11-30-h200x2-s18/scripts/ag_timeline.py $s > $O/timeline_$s.txt 2>&1
  echo "rc=$?" >> $O/timeline_$s.txt
done
