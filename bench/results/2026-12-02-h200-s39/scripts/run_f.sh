#!/usr/bin/env bash
# s39f: down tiles twice as wide as the up tiles (MlpBlocks.down_n, label dDOWN_N): fewer
# bytes per FLOP for the memory-bound down GEMM. Its CPU test on the cuda backend (3 ranks
# sharing the H200), then prefill megakernels against the default tiles in the same runs.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
W=/tmp/s39f; mkdir -p $W
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $W/commit.txt
timeout 150 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/task/test_megakernel.py::test_tp_mlp_with_wider_down_tiles > $W/pytest.txt 2>&1; echo "rc=$?" >> $W/pytest.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $W/pytest.txt | tail -5
B=128x128x64x256x4s4w8t1
for T in 256 128 512; do
  extra=$B"d256"
  [ $T = 256 ] && extra="$extra,128x128x64x256x8s4w8t1d256,128x128x64x256x2s4w8t1d256"
  timeout 200 python -m ditron bench megakernel --shape $T,4096,11008 --iters 24 --rounds 4 \
    --blocks $B,$extra --out $W/mk$T.json > $W/mk$T.txt 2>&1
  grep -E "kernels|batch1|failed|Error" $W/mk$T.txt | grep -v "_graph" | head -12
done
timeout 100 python -m ditron bench megakernel --shape 256,4096,11008 --iters 8 --rounds 1 \
  --blocks ${B}d256 --trace $W/tr256 > $W/tr256.txt 2>&1
grep -E "traced|layer3" $W/tr256.txt
mkdir -p $OUT/s39f; tar czf $OUT/s39f/s39f.tar.gz -C /tmp s39f; cp $W/*.txt $OUT/s39f/
