#!/usr/bin/env bash
# s46c: the two tests s46a/s46b's time limits cut, each alone.
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=120
O=$OUT/s46c; mkdir -p $O
timeout 200 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/ops/test_collectives.py::test_all_to_all_device_in_cuda_graph \
  "tests/nn/test_moe.py::test_inductor_compiles_the_layer_gpu" > $O/tests.txt 2>&1
echo "rc=$?" >> $O/tests.txt; grep -E "PASSED|FAILED|passed|failed|rc=" $O/tests.txt
