#!/usr/bin/env bash
# s37a: session 36's mode tests on the cuda backend (ranks share the H200): every op under
# inputs that require grad, autocast, a default device (meta and cuda), inference mode and
# torch.compile; the worked example of docs/tp_gemm.md; the megakernel built/called under
# inference mode, a default device and from compiled code; the two wait-timeout tests.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s37a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 330 python -m pytest -q -p no:cacheprovider --ditron-backend cuda --durations=8 \
  tests/ops/test_grad_modes.py tests/ops/test_docs_example.py > $O/pytest_ops.txt 2>&1
echo "rc=$?" >> $O/pytest_ops.txt
timeout 200 python -m pytest -q -p no:cacheprovider --ditron-backend cuda --durations=8 \
  tests/task/test_megakernel.py -k "inference or compiled or default_device or timeout" \
  > $O/pytest_task.txt 2>&1
echo "rc=$?" >> $O/pytest_task.txt
tail -22 $O/pytest_ops.txt; tail -14 $O/pytest_task.txt
