#!/usr/bin/env bash
# s35e: the task level's tests on the cuda backend with the grouped tile order, warps and
# default_blocks (ranks share the H200): the tuner's, the tiles', and the megakernel's
# except the two wait-timeout tests (unchanged paths, slow by design).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s35e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 420 python -m pytest -q -p no:cacheprovider --ditron-backend cuda --durations=8 \
  tests/task/test_mlp_tuner.py tests/kernels/test_tiles.py tests/task/test_megakernel.py \
  -k "not timeout" > $O/pytest.txt 2>&1
echo "rc=$?" >> $O/pytest.txt
tail -25 $O/pytest.txt
