set -x
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s27a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 400 python3 scripts/lt_probe.py $O/lt_probe.json 2>&1 | tee $O/lt_probe.txt
