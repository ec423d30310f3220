#!/usr/bin/env bash
# s39d: the simulated queue (compile(queue="simulated")) with tiles queued row block by row
# block (add_tp_mlp_stack(rows_first=True)), so that the next layer's first rows start while
# the last rows of this one still run: its test on the cuda backend (W = 1-4 sharing the
# H200), then prefill megakernels, program order against it (and rows first alone), traced.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=150
O=$OUT/s39d; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 200 python -m pytest -v -p no:cacheprovider --ditron-backend cuda \
  tests/task/test_megakernel.py::test_tp_mlp_stack_on_the_simulated_queue tests/task/test_trace.py \
  > $O/pytest.txt 2>&1; echo "rc=$?" >> $O/pytest.txt
grep -E "FAIL|ERROR|passed|failed|rc=" $O/pytest.txt | tail -8
run() {  # name, shape, blocks, queues
  timeout 200 python -m ditron bench megakernel --shape $2 --iters 16 --rounds 2 --blocks $3 \
    --queue $4 --trace $O/$1 --out $O/$1.json > $O/$1.txt 2>&1
  grep -E "kernels|batch1|traced|layer3|failed|Error" $O/$1.txt | head -30
}
run mk256 256,4096,11008 128x128x64x256x4s4w8t1 tasks,simulated+rows,tasks+rows
run mk128 128,4096,11008 128x128x64x256x4s4w8t1,64x128x64x256x4s4w8t1 tasks,simulated+rows
