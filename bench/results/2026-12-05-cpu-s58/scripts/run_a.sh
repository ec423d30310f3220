#!/usr/bin/env bash
# s58a (prepared): session 58's copy tiles for narrow rows against 8192-element ones, then
# the device all-to-all, point-to-point and interleaved-op tests on cuda.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s58a; mkdir -p $O
S=bench/results/2026-12-05-cpu-s58/scripts
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 240 python $S/a2a_tiles_ab.py > $O/a2a_tiles.txt 2>&1; echo "rc=$?" >> $O/a2a_tiles.txt; cat $O/a2a_tiles.txt
T="python -m pytest -q -p no:cacheprovider --ditron-backend cuda"
timeout 300 $T tests/ops/test_collectives.py tests/ops/test_op_sequences.py -k "device or interleaved or refused or send_recv" > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt; tail -n 3 $O/tests.txt
