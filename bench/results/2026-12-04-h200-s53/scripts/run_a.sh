#!/usr/bin/env bash
# s53a: the gather-sum / gather-dot copy loop unrolled against a runtime loop; sort_copies
# at decode sizes against 220e751 (before the placement's folded sums went a row at a
# time); on cuda, the MoE layer tests (MoEDispatch.token in the combine's backward) and the
# gather-sum / routing kernel tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s53a; mkdir -p $O
S=bench/results/2026-12-04-h200-s53/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python $S/gather_ab.py > $O/gather.txt 2>&1; echo "rc=$?" >> $O/gather.txt; cat $O/gather.txt
timeout 90 python $S/routing_decode_ab.py --old 220e751 > $O/routing.txt 2>&1; echo "rc=$?" >> $O/routing.txt; cat $O/routing.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 150 $T tests/kernels/test_gather_sum.py tests/kernels/test_routing.py > $O/test_kernels.txt 2>&1; tail -2 $O/test_kernels.txt
timeout 200 $T tests/nn/test_moe.py -k "not inductor" > $O/test_nn_moe.txt 2>&1; tail -2 $O/test_nn_moe.txt
