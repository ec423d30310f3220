#!/usr/bin/env bash
# s37e: after the cuda backend refuses the interpreter: README's first kernel as a user's
# script on the cuda backend (4 ranks share the H200), and the refusal test on a GPU host.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=80
O=$OUT/s37e; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 90 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/test_readme.py \
  tests/runtime/test_interpret.py > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
tail -8 $O/pytest.txt
