#!/bin/bash
# session 11, call f (2 H200s): where GEMM-RS loses on the small shapes: GPU timelines
# (torch.profiler, host costs taken out by a head start) of the pulled and pushed copy-engine
# engines and the baseline on 4096 x 11008 and 3584 x 14336
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s11f; mkdir -p $R
git log --oneline -1 > $R/commit.txt
for shape in 8192,4096,11008 8192,3584,14336; do
  timeout 150 python3 bench/op_timeline.py --world-size 2 --shape $shape --impls "gemm_rs/copy_engine_pull,gemm_rs/copy_engine_pull 4 chunks,gemm_rs/copy_engine,gemm_rs/baseline" --head-start-us 8000 > $R/timeline_rs_$shape.txt 2>&1; echo "rc=$?" >> $R/timeline_rs_$shape.txt
done
cd $OUT && tar czf s11f.tgz s11f && rm -rf s11f
