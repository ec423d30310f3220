#!/usr/bin/env bash
# s28f: CUDA graphs through torch.compile(mode="reduce-overhead") after an uncompiled
# warm-up inside ditron.ops.graph_safe()
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 200 python3 scripts/cudagraph_nn.py 2>&1 | grep -v Warning | tee $O/cudagraph_nn.txt | tail -8
