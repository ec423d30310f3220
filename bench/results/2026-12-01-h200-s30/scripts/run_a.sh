#!/usr/bin/env bash
# s30a: the megakernel's per-item and per-tile costs against a plain grid (mk_lab.py)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=450
O=$OUT/s30a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
cd bench/results/2026-12-01-h200-s30/scripts
timeout 500 python mk_lab.py > $O/mk_lab.txt 2>&1
tail -60 $O/mk_lab.txt
