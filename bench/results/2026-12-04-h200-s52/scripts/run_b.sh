#!/usr/bin/env bash
# s52b: sort_copies against 4816b60 (session 51) and 31f8751 (int32 placement only) with
# the scan by bin groups; the dispatch bench at 256 experts; GPU tests of the routing
# kernels, the device exchanges with a companion (one node and simulated nodes) and the
# MoE layer / fp8 dispatch on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s52b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
for old in 4816b60 31f8751; do
  timeout 120 python bench/results/2026-12-04-h200-s52/scripts/routing_ab.py --old $( [ $old = 31f8751 ] && echo bench/results/2026-12-04-h200-s52/scripts/routing_31f8751.py || echo $old ) > $O/routing_$old.txt 2>&1
  echo "rc=$?" >> $O/routing_$old.txt; cat $O/routing_$old.txt
done
timeout 150 python -m ditron bench moe --parts dispatch --experts 256 --layer-tokens 128,8192 --out $O/dispatch256.json > $O/bench256.txt 2>&1
echo "rc=$?" >> $O/bench256.txt; grep -E "^dispatch|rc=" $O/bench256.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 200 $T tests/kernels/test_routing.py > $O/test_routing.txt 2>&1; tail -2 $O/test_routing.txt
timeout 300 $T tests/ops/test_collectives.py -k "pair or across_simulated" > $O/test_pair.txt 2>&1; tail -2 $O/test_pair.txt
