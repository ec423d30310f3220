#!/usr/bin/env bash
# s60a: session 58's device all-to-all / point-to-point / interleaved-op tests on cuda again,
# verbose with durations and a 400 s limit (run_a.sh of 2026-12-05-h200-s59 gave them 300 s,
# which a cold Triton cache overran after 25 of 27 passed).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s60a; mkdir -p $O; git log --oneline -1 > $O/commit.txt
timeout 400 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda tests/ops/test_collectives.py tests/ops/test_op_sequences.py -k "device or interleaved or refused or send_recv" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=|s call" $O/tests.txt | tail -n 60
