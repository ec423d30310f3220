#!/bin/bash
# s24h: eager GEMM-RS 4096 x 11008, GPU timeline with a head start (host costs out of the
# timeline): what the GPU side of the eager pulled call costs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24h; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 90 python3 bench/op_timeline.py --world-size 2 --shape 8192,4096,11008 --head-start-us 20000 \
  --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_eager_head.txt 2>&1
echo "rc=$?" >> $O/timeline_eager_head.txt
grep -v "^\s*s[0-9]\|_warn_once\|UserWarn" $O/timeline_eager_head.txt | head -50
