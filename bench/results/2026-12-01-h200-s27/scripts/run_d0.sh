# s27d0 (one H200, ranks sharing it): the capture check after 604f6a9 (torch.cuda.is_initialized):
# the CPU-backend collectives after a CUDA-backend test in one pytest process (what failed in
# s27c), then the GPU-marked CUDA-graph tests
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s27d0; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_match_torch[2-push]" \
  "tests/ops/test_collectives.py::test_collectives_match_torch[2]" \
  "tests/ops/test_collectives.py::test_collectives_match_torch[3]" \
  tests/ops/test_collectives.py::test_cpu_backend_on_a_gpu_host_leaves_cuda_alone \
  > $O/cpu_after_cuda.txt 2>&1
tail -8 $O/cpu_after_cuda.txt
timeout 300 python3 -m pytest -v -p no:cacheprovider -m gpu -k "graph" tests/ops > $O/gpu_graph_tests.txt 2>&1
tail -10 $O/gpu_graph_tests.txt
