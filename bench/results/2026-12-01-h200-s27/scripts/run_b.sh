# s27b (one H200, ranks sharing it): every GPU-marked test and the fused collectives on the
# cuda backend, after the session's module splits (fused_launch, p2p, chunked_exchanges)
O=$OUT/s27b; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
OUT=$O bash bench/gpu_ops_tests.sh
