#!/usr/bin/env bash
# s48f: the differentiable combine as one custom op (ditron::moe_combine: the in-place
# gather-sum forward, dw from copies fetched again in backward): ditron.nn's MoE tests on
# cuda (W = 2 against torch, compile + opcheck), then the combine lab (new vs the old
# fp32-copies formulation, same run).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=110
O=$OUT/s48f; mkdir -p $O
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
timeout 120 python -m pytest -v -p no:cacheprovider --ditron-backend cuda tests/nn/test_moe.py \
  -k "mlp_matches_torch[2] or compile_and_opcheck" > $O/nn.txt 2>&1; echo "rc=$?" >> $O/nn.txt
grep -E "FAIL|passed|failed|rc=" $O/nn.txt | tail -4
timeout 80 python bench/diag/moe_combine_lab.py --out $O/lab.json > $O/lab.txt 2>&1; echo "rc=$?" >> $O/lab.txt
grep -E "^T|rc=|Error" $O/lab.txt
