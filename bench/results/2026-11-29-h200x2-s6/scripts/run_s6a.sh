#!/bin/bash
# session 6, call a: SM-kernel bandwidth lab, host breakdown incl. Triton's launch, hang diagnosis
# (lab_hang/ held `git archive a9468a5` and this script)
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6a; mkdir -p $R
git log -1 --format=%H > $R/commit.txt 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm --format=csv > $R/gpus.txt
V=default,pull:4096:128:8,pull:8192:128:8,pull:16384:128:16,push:4096:128:8,push:8192:128:8,push:16384:128:16,pull:4096:256:8,push:4096:256:8,pull:8192:256:8,push:8192:256:8,pull:4096:128:16
timeout 300 python3 bench/fused_lab.py --world-size 2 --sizes 64M,256M --ops all_gather,reduce_scatter --calls 10 --variants $V --out $R/lab > $R/lab.txt 2>&1; echo "lab rc=$?" >> $R/lab.txt
timeout 100 python3 bench/host_breakdown.py --world-size 2 --calls 100 > $R/host_breakdown.txt 2>&1; echo "rc=$?" >> $R/host_breakdown.txt
cd lab_hang && DITRON_WAIT_TIMEOUT=20 PYTHONPATH=$PWD timeout 120 python3 -m pytest -m gpu tests/ops/test_fused_collectives.py -k cuda_graph -x -q > $R/hang.txt 2>&1; echo "rc=$?" >> $R/hang.txt
