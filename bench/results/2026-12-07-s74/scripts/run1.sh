#!/usr/bin/env bash
# s74 run 1: the GPU checks left from session 73, each group under its own deadline (from a git
# archive export of the tree, as run_s70.sh says)
S=bench/results/2026-12-06-s70/scripts/run_s70.sh
DEADLINE_S=130 TAG=a bash $S "cuda:tests/engines/test_engine_edges.py tests/task/test_megakernel_after_shutdown.py"
DEADLINE_S=120 TAG=b bash $S "cuda:tests/runtime/test_agreement.py"
DEADLINE_S=150 TAG=c bash $S "-m gpu tests/engines tests/ops/test_p2p.py tests/ops/test_fused_collectives.py"
DEADLINE_S=150 TAG=d bash $S "cuda:tests/ops/test_tp_gemm.py -k ops_match_torch"
