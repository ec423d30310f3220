#!/usr/bin/env bash
# s62: the GPU-marked tests, and session 62's new multi-rank tests on cuda (two ranks
# sharing the GPU), after its changes (engine agreement, network-engine acks, all_to_all
# split gathering, bool remote pointers, notify's op check, heap/launch fixes).
#   bash run_s62.sh n   # the new tests with --ditron-backend cuda (~120 s)
#   bash run_s62.sh c   # fused collectives, MoE, out=, TP GEMMs, megakernel (~240 s)
#   bash run_s62.sh b   # engines, ditron.nn, collectives (~480 s)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
part=$1
case $part in
  n) args="--ditron-backend cuda tests/ops/test_op_sequences.py::test_engines_switched_between_calls
           tests/language/test_primitives.py::test_push_and_pull_ring_of_other_dtypes
           tests/language/test_primitives.py::test_notify_set_add_and_nothing_else
           tests/ops/test_collectives.py::test_all_to_all_with_splits_on_some_ranks_only
           tests/ops/test_collectives.py::test_refused_send_or_recv_does_not_leave_the_peer_waiting
           tests/ops/test_dtypes.py::test_moved_dtypes_arrive_bit_for_bit[2]
           tests/runtime/test_agreement.py tests/ops/test_moe.py::test_moe_refuses_bad_input" ;;
  b) args="-m gpu tests/engines tests/nn tests/ops/test_collectives.py" ;;
  c) args="-m gpu tests/ops/test_fused_collectives.py tests/ops/test_moe.py tests/ops/test_out.py tests/ops/test_tp_gemm.py tests/task" ;;
  *) echo "part must be n, b or c" >&2; exit 2 ;;
esac
O=$OUT/s62$part; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 570 python -m pytest -v -p no:cacheprovider --durations=0 $args > $O/tests.txt 2>&1; echo "rc=$?" >> $O/tests.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $O/tests.txt | tail -n 40
