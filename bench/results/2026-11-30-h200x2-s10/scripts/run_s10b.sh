#!/bin/bash
# s10b: GEMM-RS by the copy engine, pulls + addmm (new) against pushes + sum (session 9):
# the lab on the six RS shapes, then GPU correctness of the new path.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s10b; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv > $R/smi.txt 2>&1
timeout 240 python3 bench/results/2026-11-30-h200x2-s10/scripts/rs_pull_lab.py --out $R/rs_pull_lab.json > $R/rs_pull_lab.txt 2>&1; echo "rc=$?" >> $R/rs_pull_lab.txt
timeout 120 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
timeout 120 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
DITRON_WAIT_TIMEOUT=30 timeout 100 python3 bench/check_ops_at_scale.py --world-size 2 --only tp > $R/check_ops_timeout.txt 2>&1; echo "rc=$?" >> $R/check_ops_timeout.txt
cd $OUT && tar czf s10b.tgz s10b && rm -rf s10b
