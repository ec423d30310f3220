#!/usr/bin/env bash
# s52c: the device exchanges across simulated nodes on cuda again (gloo host collectives for
# simulated nodes: W = 2 on two one-rank nodes failed in s52b with NCCL's "Duplicate GPU");
# the MoE ops on cuda (layer W = 1-4, capacity, simulated nodes, fp8, bad input, CUDA graph)
# with the session's routing kernels; nn MoE under inductor.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s52c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 200 $T tests/ops/test_collectives.py -k "across_simulated" > $O/test_nodes.txt 2>&1; tail -2 $O/test_nodes.txt
timeout 330 $T tests/ops/test_moe.py -k "layer or fp8 or drops or refuses_bad_input and not grouped" > $O/test_moe.txt 2>&1; tail -3 $O/test_moe.txt
