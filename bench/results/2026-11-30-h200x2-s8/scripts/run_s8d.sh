#!/bin/bash
# session 8, call d (on nvidia-h200-x2 with CUDA_VISIBLE_DEVICES=0): one H200 shared by two
# ranks: every op family (the session's code) and the GPU-marked tests
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=0
R=$OUT/s8d; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv > $R/gpus.txt
python3 -c "import torch; print('visible GPUs:', torch.cuda.device_count())" >> $R/gpus.txt 2>&1
timeout 270 python3 bench/check_ops_at_scale.py --world-size 2 > $R/check_ops_shared.txt 2>&1; echo "rc=$?" >> $R/check_ops_shared.txt
timeout 230 python3 -m pytest -m gpu tests/ -q -rf -p no:cacheprovider > $R/gpu_tests_shared.txt 2>&1; echo "rc=$?" >> $R/gpu_tests_shared.txt
cd $OUT && tar czf s8d.tgz s8d && rm -rf s8d
