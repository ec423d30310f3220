#!/usr/bin/env bash
# s47a: the TP GEMM and fused-collective tests on the cuda backend (ranks sharing the H200)
# after session 46's host grid arithmetic (runtime/grid_math.py: only compile-checked there),
# then the MoE layer's GPU time by kernel at 128 / 8192 tokens and the SwiGLU layer rows.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s47a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
run() {  # name, timeout, pytest args...
  local name=$1 limit=$2; shift 2
  timeout $limit python -m pytest -v -p no:cacheprovider "$@" > $O/$name.txt 2>&1
  echo "rc=$?" >> $O/$name.txt
  echo "== $name"; grep -E "FAIL|ERROR|passed|failed|rc=" $O/$name.txt | tail -8
}
run fused 140 --ditron-backend cuda tests/ops/test_fused_collectives.py -k "not 8-pull"
run tp_gemm 200 --ditron-backend cuda tests/ops/test_tp_gemm.py -k "matches_torch or engines_agree or cuda_graph or gpu or pulled"
timeout 150 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,8192 \
  --profile --out $O/layer.json > $O/layer.txt 2>&1; echo "rc=$?" >> $O/layer.txt
grep -E "^layer|rc=" $O/layer.txt
timeout 100 python -m ditron bench moe --world-size 1 --parts layer --layer-tokens 128,1024 \
  --gated --out $O/layer_gated.json > $O/layer_gated.txt 2>&1; echo "rc=$?" >> $O/layer_gated.txt
grep -E "^layer|rc=" $O/layer_gated.txt
