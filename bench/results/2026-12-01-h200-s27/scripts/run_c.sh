# s27c (one H200, ranks sharing it): what s27b's run left out (the last GPU-marked test,
# cut by the script's old 330 s limit; the cuda-backend tests, whose IDs were stale)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s27c; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 150 python3 -m pytest -v -p no:cacheprovider -m gpu \
  tests/ops/test_tp_gemm.py::test_ag_gemm_reads_own_rows_in_place_gpu > $O/gpu_marked_rest.txt 2>&1
tail -3 $O/gpu_marked_rest.txt
timeout 250 python3 -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_match_torch[2-push]" \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_match_torch[2-pull]" \
  "tests/ops/test_fused_collectives.py::test_fused_collectives_survive_replayed_launches[push-3]" \
  "tests/runtime/test_launch.py::test_launch_timeout_names_stuck_ranks" \
  tests/ops/test_collectives.py -k "test_p2p or send or match_torch[2] or fused or survive or stuck" \
  > $O/cuda_backend_tests.txt 2>&1
tail -12 $O/cuda_backend_tests.txt
