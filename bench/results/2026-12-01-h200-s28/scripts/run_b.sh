#!/usr/bin/env bash
# s28b: the compile test's failure on the CUDA backend, narrowed down
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s28b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt 2>&1
timeout 200 python3 scripts/compile_diag.py none aot_eager eager 2>&1 | grep -v Warning | tee $O/diag.txt
for e in copy_engine copy_engine_pull; do
  TAG=rs=$e DITRON_RS_ENGINE=$e timeout 100 python3 scripts/compile_diag.py none aot_eager 2>&1 | grep -v Warning | tee -a $O/diag.txt
done
TAG=blocking CUDA_LAUNCH_BLOCKING=1 timeout 100 python3 scripts/compile_diag.py aot_eager 2>&1 | grep -v Warning | tee -a $O/diag.txt
