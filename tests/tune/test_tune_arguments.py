"""``tune.tuner.tune`` refuses bad arguments before it allocates or times anything (it
used to fail inside: an unknown op as an AttributeError, ``iters=0`` in the median of no
samples, an ``M`` that does not split over the ranks in the op's own check mid-tuning)."""

from __future__ import annotations

import pytest
import torch

import ditron


def _refusals(cache_dir: str) -> list[str]:
    import os

    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    messages = []
    for kw in ({"op": "matmul"}, {"M": 0}, {"N": 2.5}, {"M": 33}, {"iters": 0},
               {"warmup": -1}, {"batch": True}):
        args = {"op": "gemm_rs", "M": 32, "N": 24, "K": 20, **kw}
        with pytest.raises(ValueError) as info:
            tuner.tune(args.pop("op"), args.pop("M"), args.pop("N"), args.pop("K"),
                       torch.float32, progress=False, **args)
        messages.append(str(info.value))
    assert not os.listdir(cache_dir), "a refused call cached a decision"
    return messages


def test_tune_refuses_bad_arguments(tmp_path):
    wanted = ["tune: op must be one of ag_gemm, gemm_rs, gemm_ar, got 'matmul'",
              "tune: M must be a positive int, got 0",
              "tune: N must be a positive int, got 2.5",
              "tune: gemm_rs splits M = 33 rows over 2 ranks; M must divide by 2",
              "tune: iters must be a positive int, got 0",
              "tune: warmup must be an int >= 0, got -1",
              "tune: batch must be a positive int, got True"]
    for messages in ditron.launch(_refusals, 2, str(tmp_path), backend="cpu"):
        assert messages == wanted
