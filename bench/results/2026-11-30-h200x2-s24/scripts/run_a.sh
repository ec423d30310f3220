#!/bin/bash
# s24a: graph-safe pulled GEMM-RS with its signals on a side stream (lane: copies or kernels)
# against on the compute stream; correctness (GPU tests) then GPU timeline, then the bench
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/s24a; mkdir -p $O
git log --oneline -1 > $O/commit.txt; git status --short >> $O/commit.txt
nvidia-smi -L > $O/gpus.txt
timeout 150 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py -k "cuda_graph" > $O/pytest_lane_copies.txt 2>&1
echo "rc=$?" >> $O/pytest_lane_copies.txt; tail -2 $O/pytest_lane_copies.txt
DITRON_LANE_COPIES=0 timeout 100 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py -k "cuda_graph" > $O/pytest_lane_kernels.txt 2>&1
echo "rc=$?" >> $O/pytest_lane_kernels.txt; tail -2 $O/pytest_lane_kernels.txt
for v in "0 1 compute" "1 1 lane_copies" "1 0 lane_kernels"; do
  set -- $v
  DITRON_RS_SIGNAL_LANE=$1 DITRON_LANE_COPIES=$2 timeout 80 python3 bench/op_timeline.py --world-size 2 \
    --shape 8192,4096,11008 --graph --impls "gemm_rs/gemm,gemm_rs/copy_engine_pull" > $O/timeline_$3.txt 2>&1
  echo "rc=$?" >> $O/timeline_$3.txt
  echo "== $3"; grep -v "^\s*s[0-9]" $O/timeline_$3.txt | head -40
done
for v in "0 compute" "1 lane_copies"; do
  set -- $v
  DITRON_RS_SIGNAL_LANE=$1 DITRON_CACHE_DIR=$(mktemp -d) timeout 120 python3 -m ditron bench tp-gemm --world-size 2 --ops rs --graphs \
    --shapes 4096x11008,3584x14336 --out $O/bench_$2 > $O/bench_$2.txt 2>&1
  echo "rc=$?" >> $O/bench_$2.txt
  echo "== bench $2"; tail -30 $O/bench_$2.txt
done
