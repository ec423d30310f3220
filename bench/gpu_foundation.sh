#!/usr/bin/env bash
# GPU check of the foundation (issue 2): demo and primitive/runtime tests on the cuda backend,
# with 2+ ranks sharing one GPU and with one rank per GPU. Run from the repo root:
#   OUT=bench/results bash bench/gpu_foundation.sh
set -u
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DITRON_LAUNCH_TIMEOUT=${DITRON_LAUNCH_TIMEOUT:-120}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
status=0
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
python3 -m ditron info 2>&1 | tee "$OUT/foundation_info.txt"
python3 -c "import torch.distributed._symmetric_memory as s; print(\"symm_mem backend:\", s.get_backend(\"cuda\"))" 2>&1 | tee -a "$OUT/foundation_info.txt"
nvidia-smi topo -m 2>&1 | tee -a "$OUT/foundation_info.txt"

echo "== demo: 2 ranks sharing GPU 0 =="
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m ditron demo --world-size 2 --n 4096 --repeats 5 \
  2>&1 | tee "$OUT/foundation_demo.txt" || status=1
echo "== tests (cuda backend): ranks sharing GPU 0 =="
CUDA_VISIBLE_DEVICES=0 timeout 240 python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda \
  tests/language tests/runtime -x 2>&1 | tee "$OUT/foundation_tests_1gpu.txt" | tail -30 || status=1
if [ "$NGPU" -ge 2 ]; then
  echo "== demo: one rank per GPU =="
  timeout 120 python3 -m ditron demo --world-size "$NGPU" --n 4096 --repeats 5 \
    2>&1 | tee -a "$OUT/foundation_demo.txt" || status=1
  echo "== tests (cuda backend): one rank per GPU (more ranks share round-robin) =="
  timeout 240 python3 -m pytest -q -p no:cacheprovider --ditron-backend cuda \
    tests/language -x 2>&1 | tee "$OUT/foundation_tests_${NGPU}gpu.txt" | tail -30 || status=1
fi
exit $status
