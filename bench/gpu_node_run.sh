#!/usr/bin/env bash
# Issue 5: the full-node measurement run, for any number of GPUs on one host. Usage:
#   OUT=bench/results/<date>-<machine> bash bench/gpu_node_run.sh
# (1) topology, copy-engine and SM-kernel ceilings (peer_bandwidth --sm), (2) `ditron bench collectives` over the sweep, every
# engine, eager (isolated and back to back) and under CUDA graphs, against NCCL (its rows are
# the NCCL bus-bandwidth sweep), (3) `ditron bench tp-gemm --tune` at world size NGPU, 4 and 2, against cuBLAS +
# NCCL and PyTorch's fused ops, (4) correctness of every op at the full world size.
# With two or more GPUs it first runs the foundation tests (0; FOUNDATION=0 skips them) and
# every GPU-marked test (5). With one GPU (the rehearsal): 2 processes share it (no NCCL
# baseline there), the sweep stops at 4M and tp-gemm runs 2 processes at a quarter of the
# shapes. QUICK=1 shortens all. STEPS picks steps (default "0 5 1 2 3 4"): a device call is
# limited to 10 minutes, so on a multi-GPU machine run one or two steps per call (STEPS=0,
# STEPS=5, STEPS="1 2", STEPS=3, STEPS=4; BUDGET bounds the call; 6: fused-collective
# variants, 7: overlap traces, 8: host time per function of the overlapped ops, 9: a
# sequence-parallel MLP of ditron.nn against cuBLAS + NCCL, two or more GPUs; 10: expert
# parallelism, `ditron bench moe`, grouped GEMM and the MoE layer against torch.distributed);
# ENGINES=copy_engine,sm,tma adds the TMA engine to the sweep; GRAPH_MAX (default 4M) is the
# largest size timed under CUDA graphs. tp-gemm also times the ops under CUDA graphs.
# A device call returns at most 8 files: tar "$OUT" into one file of the call's output.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=${DITRON_LAUNCH_TIMEOUT:-300}
OUT=${OUT:-bench/results/node}
mkdir -p "$OUT"
export DITRON_CACHE_DIR=${DITRON_CACHE_DIR:-$OUT/cache}
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
status=0
STEPS=" ${STEPS:-0 5 1 2 3 4} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
# a step that failed or ran out of the budget (timeout's status 124) is named in run.txt
failed() { local rc=$?; status=1; echo "step $1 failed (status $rc; 124: out of budget)" \
  | tee -a "$OUT/run.txt"; }
# BUDGET (seconds, default 560) bounds the whole call; each step gets what is left of it.
START=$SECONDS
left() { local l=$(( ${BUDGET:-560} - (SECONDS - START) )); echo $(( l > 10 ? l : 10 )); }
if [ "$NGPU" -ge 2 ]; then
  W=$NGPU; SIZES=4K,8K,64K,256K,1M,4M,16M,64M,256M,1G; TP_SCALE=1
  TP_WORLDS=$(printf '%s\n' "$NGPU" 4 2 | awk -v n="$NGPU" '$1 <= n && !seen[$1]++' | xargs)
else
  W=2; SIZES=8K,64K,1M,4M; TP_WORLDS=2; TP_SCALE=0.25
fi
if [ "${QUICK:-0}" = 1 ]; then SIZES=8K,1M; TP_SCALE=0.125; fi
echo "machine: $NGPU GPU(s); collectives at W=$W; tp-gemm at W in ($TP_WORLDS); steps$STEPS" \
  | tee -a "$OUT/run.txt"
date -u | tee -a "$OUT/run.txt"

if want 0 && [ "$NGPU" -ge 2 ] && [ "${FOUNDATION:-1}" = 1 ]; then
  echo "== (0) foundation tests on the cuda backend, one rank per GPU (ranks 1-4 share GPUs)"
  timeout $(left) python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/language \
    tests/runtime > "$OUT/foundation_tests_cuda.txt" 2>&1 || failed 0
  tail -n 3 "$OUT/foundation_tests_cuda.txt"
fi
if want 5; then
  echo "== (5) every GPU-marked test"
  timeout $(left) python3 -m pytest -q -p no:cacheprovider -m gpu tests/ \
    > "$OUT/gpu_marked_tests.txt" 2>&1 || failed 5
  tail -n 3 "$OUT/gpu_marked_tests.txt"
fi

if want 1; then
  echo "== (1) topology, copy-engine and SM-kernel ceilings"
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; head -12 "$OUT/topo.txt"
  timeout $(( $(left) < 120 ? $(left) : 120 )) python3 bench/peer_bandwidth.py --sm --out "$OUT" || failed 1
fi

if want 2; then
  echo "== (2) collectives: every engine, eager and CUDA graphs, against NCCL"
  timeout $(left) python3 -m ditron bench collectives --world-size "$W" --sizes "$SIZES" \
    --engines "${ENGINES:-copy_engine,sm}" --graphs --graph-max "${GRAPH_MAX:-4M}" --busy \
    --out "$OUT/collectives" \
    > "$OUT/collectives.txt" 2>&1 || failed 2
  tail -n 40 "$OUT/collectives.txt"
fi

if want 3; then
  echo "== (3) TP GEMMs after the tuner, against cuBLAS + NCCL and PyTorch's fused ops"
  for TW in $TP_WORLDS; do
    [ "$TW" -le "$NGPU" ] || [ "$NGPU" -lt 2 ] || continue  # one GPU: 2 ranks share it
    timeout $(left) python3 -m ditron bench tp-gemm --world-size "$TW" --scale "$TP_SCALE" \
      --tune --graphs --out "$OUT/tp_gemm_w$TW" > "$OUT/tp_gemm_w$TW.txt" 2>&1 || failed 3
    tail -n 34 "$OUT/tp_gemm_w$TW.txt"
  done
fi

if want 4; then
  echo "== (4) correctness of every op at W=$W"
  timeout $(left) python3 bench/check_ops_at_scale.py --world-size "$W" \
    > "$OUT/check_ops.txt" 2>&1 || failed 4
  tail -n 6 "$OUT/check_ops.txt"
fi
if want 6; then
  echo "== (6) fused-collective variants under CUDA graphs (bench/fused_lab.py)"
  timeout $(left) python3 bench/fused_lab.py --world-size "$W" --sizes "${LAB_SIZES:-256K,1M,4M,16M}" --out "$OUT/fused_lab" \
    > "$OUT/fused_lab.txt" 2>&1 || failed 6
  tail -n 100 "$OUT/fused_lab.txt"
fi

if want 7; then
  echo "== (7) overlap traces of the first AG-GEMM and GEMM-RS shapes at W=$W"
  for spec in "ag_gemm 11008 4096" "gemm_rs 4096 11008"; do
    set -- $spec
    timeout $(left) python3 -m ditron trace --op "$1" --world-size "$W" --m 8192 --n "$2" \
      --k "$3" --calls 3 --out "$OUT/trace_$1" > "$OUT/trace_$1.txt" 2>&1 || failed 7
    grep "call 2" "$OUT/trace_$1.txt"
  done
fi
if want 8; then
  echo "== (8) host time per function of one call (bench/host_breakdown.py)"
  timeout $(( $(left) < 120 ? $(left) : 120 )) python3 bench/host_breakdown.py --world-size "$W" \
    > "$OUT/host_breakdown.txt" 2>&1 || failed 8
  grep "==" "$OUT/host_breakdown.txt"
fi
if want 9 && [ "$NGPU" -ge 2 ]; then
  echo "== (9) a sequence-parallel MLP (ditron.nn) against cuBLAS + NCCL at W=$W"
  timeout $(left) python3 -m ditron bench tp-mlp --world-size "$W" --out "$OUT/tp_mlp_w$W.json" \
    > "$OUT/tp_mlp.txt" 2>&1 || failed 9
  tail -n 3 "$OUT/tp_mlp.txt"
fi
if want 10; then
  MW=$W; [ "$NGPU" -ge 2 ] || MW=1  # its torch.distributed baseline needs a GPU per rank
  echo "== (10) expert parallelism: grouped GEMM and the MoE layer at W=$MW (bench moe)"
  timeout $(left) python3 -m ditron bench moe --world-size "$MW" --out "$OUT/moe_w$MW.json" \
    > "$OUT/moe.txt" 2>&1 || failed 10
  grep -E "^(gemm|layer)" "$OUT/moe.txt"
fi
echo "status $status" | tee -a "$OUT/run.txt"
exit $status
