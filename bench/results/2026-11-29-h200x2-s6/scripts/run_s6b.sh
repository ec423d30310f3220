#!/bin/bash
# session 6, call b: hybrid ceilings, fast launch validated on every op, host time, wide fused defaults
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6b; mkdir -p $R
timeout 90 python3 bench/peer_bandwidth.py --size 256M --sm --out $R > $R/peer_bandwidth.txt 2>&1; echo "rc=$?" >> $R/peer_bandwidth.txt
timeout 60 python3 bench/peer_bandwidth.py --size 256M --sm --programs 264 --out $R/p264 > $R/peer_bandwidth_p264.txt 2>&1; echo "rc=$?" >> $R/peer_bandwidth_p264.txt
timeout 220 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
timeout 80 python3 bench/host_breakdown.py --world-size 2 --calls 100 > $R/host_breakdown.txt 2>&1; echo "rc=$?" >> $R/host_breakdown.txt
timeout 150 python3 bench/fused_lab.py --world-size 2 --sizes 32M,64M,256M,1G --ops all_gather,reduce_scatter --calls 5 --variants default,push:4096 --out $R/lab > $R/lab.txt 2>&1; echo "rc=$?" >> $R/lab.txt
