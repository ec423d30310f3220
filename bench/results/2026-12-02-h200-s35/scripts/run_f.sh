#!/usr/bin/env bash
# s35f: after default_blocks learned the shared-memory limit (70513dd): the tuner's tests and
# the compile refusals / warps-to-launch test on the cuda backend (ranks share the H200).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s35f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 140 python -m pytest -q -p no:cacheprovider --ditron-backend cuda --durations=5 \
  tests/task/test_mlp_tuner.py tests/task/test_megakernel.py::test_bad_compiles_raise_before_any_kernel \
  > $O/pytest.txt 2>&1
echo "rc=$?" >> $O/pytest.txt
tail -12 $O/pytest.txt
