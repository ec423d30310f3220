#!/usr/bin/env bash
# s38b: on the cuda backend (ranks sharing the H200): the megakernel through descriptors
# (CPU test and the GPU stack test with its TMA cases), the persistent GEMM's TMA tests
# after its descriptors moved to kernels/descriptors.py and its fence to the language;
# then session 37's unrun checks: README's first kernel, the agreement check.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s38b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 420 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/task/test_megakernel.py::test_tp_mlp_through_descriptors tests/task/test_megakernel.py::test_tp_mlp_stack_gpu \
  tests/kernels/test_gemm_tma.py tests/kernels/test_tiles.py tests/test_readme.py tests/runtime/test_agreement.py \
  > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/pytest.txt | tail -40
