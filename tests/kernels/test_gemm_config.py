from __future__ import annotations

import pytest
import torch

from ditron.kernels.gemm import default_config, pipeline_bytes
from ditron.tune.tuner import GPU_CANDIDATES

H100_SMEM = 227 * 1024  # shared memory per block (opt-in) on H100/H200


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_default_config_fits_hopper_shared_memory(dtype):
    # Regression: fp32 with 128x256x64 tiles in 3 stages needed 262 KB and failed to load.
    cfg = default_config(torch.device("cuda"), dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    assert pipeline_bytes(cfg, itemsize) <= H100_SMEM


def test_pipeline_bytes_counts_every_stage():
    cfg = GPU_CANDIDATES[0]
    one = (cfg.block_m + cfg.block_n) * cfg.block_k * 2
    assert pipeline_bytes(cfg, 2) == one * cfg.num_stages
