#!/usr/bin/env bash
# s31f: the final code: GPU-marked op tests (their kernels wait with the volatile-load
# polls), then bench/megakernel.py with its defaults (MlpBlocks 16x128x128x256x4, nn.Linear
# weights, Triton's num_stages) on both shapes. One H200, W = 1.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s31f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/ops/test_tp_gemm.py tests/ops/test_collectives.py 2>&1 | tail -4 > $O/gpu_tests.txt
timeout 70 python bench/megakernel.py --shape 16,1024,2816 --iters 16 --rounds 2 --out $O/mk_1024.json > $O/mk_1024.txt 2>&1
timeout 70 python bench/megakernel.py --shape 16,4096,11008 --iters 16 --rounds 2 --out $O/mk_4096.json > $O/mk_4096.txt 2>&1
cat $O/gpu_tests.txt; grep -h "layers:\|batch\|kernels\|host" $O/mk_*.txt
