# s27f (one H200): the README's test command's suite on a host with a GPU (CPU backend,
# GPU-marked tests left out: they ran in s27b-s27d0), after 604f6a9
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s27f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 400 python3 -m pytest -v -p no:cacheprovider -m "not gpu" --durations=5 tests > $O/cpu_suite_on_gpu_host.txt 2>&1
echo "rc=$?" >> $O/cpu_suite_on_gpu_host.txt
grep -c PASSED $O/cpu_suite_on_gpu_host.txt; grep -E "FAILED|ERROR" $O/cpu_suite_on_gpu_host.txt | head -20; tail -12 $O/cpu_suite_on_gpu_host.txt
