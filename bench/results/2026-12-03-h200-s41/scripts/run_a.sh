#!/usr/bin/env bash
# s41a: worlds over process groups on the cuda backend (4 ranks sharing the H200, groups
# [[0,1],[2,3]], [[0,2],[1,3]], [[0,1,3],[2]]), then the dtype / reduction tests of
# session 40 on this head (all_gather(out=) at the call's width was not run on a GPU), then
# the GPU-marked collective and TP GEMM tests (fallbacks and network engine now name the
# world's groups).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s41a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
run() {  # name, timeout, pytest args...
  local name=$1 limit=$2; shift 2
  timeout $limit python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt
  echo "== $name"; grep -E "FAIL|ERROR|passed|failed|rc=" $O/$name.txt | tail -8
}
run groups 120 --ditron-backend cuda tests/runtime/test_groups.py
run dtypes 260 --ditron-backend cuda tests/ops/test_dtypes.py tests/ops/test_reductions.py -k "not refus"
run gpu_marked 200 -m gpu tests/ops/test_collectives.py tests/ops/test_tp_gemm.py tests/runtime
tar -C $OUT -czf $OUT/s41a.tgz s41a
