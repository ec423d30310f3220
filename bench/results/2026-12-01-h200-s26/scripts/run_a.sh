#!/bin/bash
# s26a (one H200, two ranks sharing it): TP-GEMM GPU tests and the CPU suite's GEMM-RS tests
# on the CUDA backend with the eager signal lane and acknowledgements implied by data; host
# time per eager pulled call, acknowledgements implied or sent
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1
O=$OUT/s26a; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python3 -m pytest -q -m gpu tests/ops/test_tp_gemm.py > $O/pytest_gpu.txt 2>&1
echo "rc=$?" >> $O/pytest_gpu.txt; tail -2 $O/pytest_gpu.txt
timeout 200 python3 -m pytest -q --ditron-backend cuda tests/ops/test_tp_gemm.py \
  -k "pulled_matches or engines_agree or ops_match_torch" > $O/pytest_cuda.txt 2>&1
echo "rc=$?" >> $O/pytest_cuda.txt; tail -2 $O/pytest_cuda.txt
for v in 1 0; do
  DITRON_ACK_BY_DATA=$v timeout 90 python3 scripts/host_lab.py 8192,4096,11008 > $O/host_ack$v.txt 2>&1
  echo "rc=$?" >> $O/host_ack$v.txt; echo "== ack_by_data $v"; grep -v Warn $O/host_ack$v.txt | tail -3
done
