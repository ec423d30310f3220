#!/bin/bash
# session 6, call c: hybrid ceilings; GPU tests + check_ops on the copy-engine driver path and chunked GEMM-RS
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s6c; mkdir -p $R
timeout 60 python3 bench/peer_bandwidth.py --size 256M --sm --out $R > $R/peer_bandwidth.txt 2>&1; echo "rc=$?" >> $R/peer_bandwidth.txt
timeout 45 python3 bench/peer_bandwidth.py --size 256M --sm --programs 264 --out $R/p264 > $R/peer_bandwidth_p264.txt 2>&1; echo "rc=$?" >> $R/peer_bandwidth_p264.txt
timeout 230 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops.txt 2>&1; echo "rc=$?" >> $R/check_ops.txt
timeout 240 python3 -m pytest -m gpu tests/ -q -x -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
