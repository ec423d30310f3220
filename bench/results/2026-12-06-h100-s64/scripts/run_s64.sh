#!/usr/bin/env bash
# s64: the GPU runs session 63 could not make (its device time ran out), plus this session's
# changes. Parts run in the order given, each bounded by its own timeout:
#   bash run_s64.sh g2          # then: bash run_s64.sh w t
#   g2: -m gpu ditron.nn, collectives, fused collectives, MoE, out=, megakernel (~330 s)
#   w:  --ditron-backend cuda language + timeout + signals + task tests (waits' compile-time checks,
#       barrier epoch step-back, wait budgets; two ranks sharing the GPU)
#   e:  -m gpu engines, gather_sum, workspaces, api contract; torch's add_ per dtype on CUDA
#   t:  `ditron bench tp-gemm` with 2 ranks sharing the GPU, quarter shapes, tuned (the one-GPU
#       rehearsal of bench/gpu_node_run.sh step 3; correctness and the topology in tune keys)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for part in "$@"; do
  O=$OUT/s64$part; mkdir -p $O
  { git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
  case $part in
    g2) timeout 540 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/nn \
          tests/ops/test_collectives.py tests/ops/test_fused_collectives.py tests/ops/test_moe.py \
          tests/ops/test_out.py tests/task > $O/tests.txt 2>&1 ;;
    w) timeout 400 python -m pytest -v -p no:cacheprovider --durations=0 --ditron-backend cuda \
          tests/language tests/runtime/test_timeout.py tests/runtime/test_signals.py \
          tests/runtime/test_agreement.py tests/task > $O/tests.txt 2>&1 ;;
    e) { python bench/results/2026-12-06-h100-s64/scripts/torch_adds.py cuda
         timeout 300 python -m pytest -v -p no:cacheprovider --durations=0 -m gpu tests/engines \
          tests/kernels/test_gather_sum.py tests/ops/test_workspaces.py tests/test_api_contract.py
       } > $O/tests.txt 2>&1 ;;
    t) DITRON_CACHE_DIR=$O/cache timeout 300 python -m ditron bench tp-gemm --world-size 2 \
          --scale 0.25 --tune --out $O > $O/tests.txt 2>&1 ;;
    *) echo "part must be g2, w, e or t" >&2; exit 2 ;;
  esac
  echo "rc=$?" >> $O/tests.txt
  echo "== $part"; grep -E "FAILED|ERROR|passed|failed|rc=|Error" $O/tests.txt | tail -n 30
done
