#!/usr/bin/env bash
# s37d: README's first kernel as a script on the cuda backend (4 ranks share the H200); the
# one agreement check (runtime/agreement.py) on the cuda backend: its unit test, the
# megakernel's different-graphs and the heap's mismatched-shapes refusals.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s37d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 300 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/test_readme.py \
  tests/runtime/test_agreement.py tests/runtime/test_heap.py::test_mismatched_shapes_raise_naming_ranks \
  tests/task/test_megakernel.py::test_ranks_building_different_graphs_raise \
  > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
tail -14 $O/pytest.txt
