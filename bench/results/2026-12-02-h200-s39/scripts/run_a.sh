#!/usr/bin/env bash
# s39a: FastKernel encodes each distinct host TMA descriptor once (was: at every launch):
# the launch tests, the persistent GEMM's TMA tests and the GPU-marked TP GEMM / linear
# tests on the cuda backend; the megakernel with one rank on pointer loads (ranks sharing
# the H200); then the host cost of one persistent-GEMM launch, A/B in one process, and the
# host breakdown of the TP GEMM ops at 2 ranks, A/B.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s39a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 300 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/runtime/test_triton_launch.py tests/kernels/test_gemm_tma.py \
  "tests/task/test_megakernel.py::test_tp_mlp_one_rank_without_descriptors" \
  > $O/pytest_cuda.txt 2>&1; echo "rc=$?" >> $O/pytest_cuda.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest_cuda.txt | tail -12
timeout 300 python -m pytest -v -p no:cacheprovider -m gpu tests/ops/test_tp_gemm.py tests/nn/test_linear.py tests/ops/test_out.py \
  > $O/pytest_gpu.txt 2>&1; echo "rc=$?" >> $O/pytest_gpu.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest_gpu.txt | tail -12
timeout 150 python bench/gemm_launch_cost.py --out $O > $O/gemm_launch_cost_stdout.txt 2>&1
head -14 $O/gemm_launch_cost.txt
for mode in "" "--encode-every-launch"; do
  echo "== host_breakdown $mode"
  timeout 150 python bench/host_breakdown.py --world-size 2 --calls 40 --shape 2048,4096,4096 $mode \
    > $O/host_breakdown${mode:+_every}.txt 2>&1
  grep -E "^== |make_tensordesc|CudaLauncher|launch_gemm|TensorDescriptor" $O/host_breakdown${mode:+_every}.txt | head -60
done
