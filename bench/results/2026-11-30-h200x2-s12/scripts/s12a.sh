#!/bin/bash
# session 12, call a (2 H200s): GEMM-RS engine copy_engine_persistent (one persistent GEMM,
# peers' tiles stored locally and counted per chunk, the copy engine pushing each counted
# chunk, own tiles adding the partials in a flattened epilogue). GPU tests of the TP GEMMs,
# then the three small GEMM-RS shapes after the tuner (which now tries the engine), with
# method="overlap" forced to the new engine (the "ditron" column), eager and under graphs
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/s12a; mkdir -p $R
nvidia-smi -L > $R/gpus.txt
timeout 170 python3 -m pytest -m gpu tests/ops/test_tp_gemm.py -q -rf -p no:cacheprovider > $R/gpu_tests.txt 2>&1; echo "rc=$?" >> $R/gpu_tests.txt
DITRON_CACHE_DIR=$R/cache DITRON_RS_ENGINE=copy_engine_persistent timeout 330 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --shapes 4096x11008,4096x14336,3584x14336 --tune --graphs --out $R/tp_rs_small > $R/tp_rs_small.txt 2>&1; echo "rc=$?" >> $R/tp_rs_small.txt
cd $OUT && tar czf s12a.tgz s12a && rm -rf s12a
