#!/usr/bin/env bash
# s43a: all_to_all_device with the gathers fused into its kernels (send_index / recv_index):
# its GPU-marked tests (also session 42's unrerun ones), the MoE ops and nn tests on the cuda
# backend (autocast included); then bench moe's a2a part (fused vs index_select around it)
# and the layer at 128 / 1024 / 8192 tokens (the "auto" grouped-GEMM threshold of 512 rows).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s43a; mkdir -p $O
nvidia-smi -L > $O/device.txt
git log --oneline -1 > $O/commit.txt 2>/dev/null
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu \
  tests/ops/test_collectives.py -k all_to_all_device > $O/a2a_tests.txt 2>&1
echo "rc=$?" >> $O/a2a_tests.txt
timeout 150 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
  tests/ops/test_moe.py tests/nn/test_moe.py > $O/moe_tests.txt 2>&1
echo "rc=$?" >> $O/moe_tests.txt
timeout 240 python -m ditron bench moe --world-size 1 --parts a2a,layer \
  --layer-tokens 128,1024,8192 --out $O/moe.json > $O/moe.txt 2>&1
echo "rc=$?" >> $O/moe.txt
for f in a2a_tests moe_tests; do echo "== $f"; grep -E "PASS|FAIL|ERROR|passed|failed|rc=" $O/$f.txt | tail -24; done
grep -E "^(a2a|layer|rc)" $O/moe.txt
