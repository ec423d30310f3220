#!/usr/bin/env bash
# s33a: the megakernel's notifies to its own rank at GPU scope, and timeout messages that
# name the chain of waits (the working tree), on the cuda backend: the lonely-rank case five
# times with its message printed, then tests/task/test_megakernel.py; then GPU scope against
# system scope (/tmp/base: the working tree with signal.py and codegen.py of 8ba47d9), one
# process per run, alternating, small layers. One H200, W = 1, MlpBlocks() defaults.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 DITRON_LAUNCH_TIMEOUT=200
O=$OUT/s33a; mkdir -p $O/runs
{ git log --oneline -1; git status --short; nvidia-smi -L; } > $O/commit.txt
pip install --quiet --no-deps -e . > /dev/null 2>&1
for i in 1 2 3 4 5; do
  PYTHONPATH=$PWD DITRON_WAIT_TIMEOUT=0.5 timeout 60 python -c "
import ditron
from tests.task.test_megakernel import _missing_rank_case
try:
    ditron.launch(_missing_rank_case, 2, backend='cuda'); print('no error')
except Exception as e:
    print(type(e).__name__, e)
" 2>&1 | tail -1 >> $O/timeout_messages.txt
done
cat $O/timeout_messages.txt
PYTHONPATH=$PWD timeout 240 python -m pytest -q -p no:cacheprovider --ditron-backend cuda tests/task/test_megakernel.py 2>&1 | tail -25 > $O/cuda_tests.txt
tail -3 $O/cuda_tests.txt
rm -rf /tmp/base && mkdir -p /tmp/base && git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C /tmp/base
for f in ditron/task/codegen.py ditron/language/signal.py; do git show 8ba47d9:$f > /tmp/base/$f; done
mk() { root=$1; name=$2; shape=$3; t=$4; shift 4; (cd $root && PYTHONPATH=$root DITRON_CACHE_DIR=/tmp/cache_$name timeout $t python bench/megakernel.py --shape $shape --iters 16 --rounds 2 "$@" --out $O/runs/$name.json > $O/runs/$name.txt 2>&1); { echo "== $name"; grep -h "batch8\|kernels\|Error" $O/runs/$name.txt; } >> $O/summary.txt; }
S=16,1024,2816
mk /tmp/base sys_s1 $S 70; mk $PWD gpu_s1 $S 70; mk /tmp/base sys_s2 $S 70; mk $PWD gpu_s2 $S 70
tar czf $O/runs.tar.gz -C $O runs && rm -rf $O/runs
cat $O/summary.txt
