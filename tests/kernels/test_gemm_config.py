from __future__ import annotations

import json
import textwrap

import pytest
import torch

from ditron.kernels.gemm import GemmConfig, default_config, smem_bytes
from ditron.tune.tuner import GPU_CANDIDATES

from ..cuda_script import run_as_cuda

H100_SMEM = 227 * 1024  # shared memory per block (opt-in) on H100/H200


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_default_config_fits_hopper_shared_memory(dtype):
    # Regression: fp32 with 128x256x64 tiles in 3 stages needed 262 KB and failed to load.
    cfg = default_config(torch.device("cuda"), dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    assert smem_bytes(cfg, itemsize) <= H100_SMEM


def test_smem_bytes_counts_every_stage():
    cfg = GemmConfig(flatten=False, tma_store=False)
    one = (cfg.block_m + cfg.block_n) * cfg.block_k * 2
    assert smem_bytes(cfg, 2) == one * cfg.num_stages


_COMPILE = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
    import cuda_compile_check as check  # switches the backend off the interpreter
    from triton.runtime import driver
    driver.set_active(check._Hopper())
    import torch
    from ditron.kernels import gemm
    out = []
    for spec in json.loads(sys.argv[2]):
        cfg = gemm.GemmConfig(**spec["cfg"])
        dtype = getattr(torch, spec["dtype"])
        M, N, K = 1024, 1024, 1024
        a = torch.empty(M, K, dtype=dtype)
        b = torch.empty(N, K, dtype=dtype).t()
        c = torch.empty(M, N, dtype=dtype)
        order = torch.zeros(64, dtype=torch.int32)
        grid, args, kw = gemm.gemm_launch(a, b, c, M, order=order, seg_rows=M, cfg=cfg,
                                          use_tma=True)
        kw["GPU_TIMER"], kw["UPCAST"] = True, False
        kernel = gemm.persistent_gemm.warmup(*args, grid=(1,), **kw)
        out.append(kernel.metadata.shared)
    print(json.dumps(out))
""")


def test_smem_estimate_bounds_what_the_compiler_allocates():
    """``smem_bytes`` (used to drop tile configs that cannot load) against Triton's own
    allocation for sm_90, compiled without a GPU: never below it, and for 16-bit operands
    (tensor-core pipeline) at most 5% above (fp32 with IEEE precision takes another path that
    stages less)."""
    specs = [
        (GemmConfig(), "bfloat16"),
        (GemmConfig(flatten=True), "bfloat16"),
        (GemmConfig(flatten=True, tma_store=True), "bfloat16"),
        (GemmConfig(128, 128, 64, 8, 4, 4, flatten=True, tma_store=True), "float16"),
        (default_config(torch.device("cuda"), torch.float32), "float32"),
    ]
    payload = json.dumps([{"cfg": vars(c), "dtype": d} for c, d in specs])
    shared = run_as_cuda(_COMPILE, payload)
    for (cfg, dtype), got in zip(specs, shared, strict=True):
        est = smem_bytes(cfg, torch.empty((), dtype=getattr(torch, dtype)).element_size())
        assert got <= est + 1024, f"{cfg.label()} {dtype}: compiler {got} B > estimate {est} B"
        if dtype != "float32":
            assert est <= got * 1.05, f"{cfg.label()} {dtype}: estimate {est} B >> {got} B"


@pytest.mark.parametrize("cfg", GPU_CANDIDATES, ids=lambda c: c.label())
def test_tuner_candidates_fit_for_16_bit_operands(cfg):
    assert smem_bytes(cfg, 2) <= H100_SMEM


@pytest.mark.parametrize("field, value, words", [
    ("block_m", 12, "block_m must be a power of two >= 16, got 12"),
    ("block_k", 8, "block_k must be a power of two >= 16"),
    ("block_n", 256.0, "block_n must be a power of two"),
    ("num_warps", 3, "num_warps must be one of 1, 2, 4, 8, 16, 32"),
    ("num_stages", 0, "num_stages must be an int >= 1"),
    ("group_m", 0, "group_m must be an int >= 1"),
    ("programs", -1, "programs must be an int >= 0"),
])
def test_bad_tile_config_is_refused_when_built(field, value, words):
    """Before, a 12-row tile reached the kernel (Triton's "arange's range must be a power
    of 2" from inside an overlapped op's launch) and 3 warps or 0 stages failed on the GPU
    only; both GEMMs' configs now refuse them when built."""
    from ditron.kernels.grouped_gemm import GroupedGemmConfig

    with pytest.raises(ValueError, match=f"GemmConfig: {words}"):
        GemmConfig(**{field: value})
    if field != "programs":
        with pytest.raises(ValueError, match=f"GroupedGemmConfig: {words}"):
            GroupedGemmConfig(**{field: value})
    GemmConfig(block_m=16, block_n=32, block_k=16, num_warps=1, num_stages=1, group_m=1)


def test_stale_cached_decision_with_a_bad_config_is_ignored(tmp_path, monkeypatch):
    """A decision cached by an older version whose tiles are now refused reads as
    "not tuned" (tune again), not as an error at the op's call."""
    from ditron.tune import cache, decisions

    monkeypatch.setenv("DITRON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(decisions, "_device_name", lambda: "cpu")
    key = decisions.key_for("ag_gemm", 64, 32, 16, torch.float32, 2)
    entry = {"method": "overlap", "config": {"block_m": 12}, "engine": "colocated",
             "time_us": 1.0}
    cache.put(key, entry)
    assert decisions.lookup("ag_gemm", 64, 32, 16, torch.float32, 2) is None
    cache.put(key, {**entry, "config": {"block_m": 32}})
    assert decisions.lookup("ag_gemm", 64, 32, 16, torch.float32, 2).config.block_m == 32


@pytest.mark.parametrize("blocks, words", [
    ((2048, 1024, 16), "block_m x block_n = 2048 x 1024 is a tile of 2097152 elements"),
    ((16, 16, 2**17), "block_m x block_k = 16 x 131072 is a tile of 2097152 elements"),
])
def test_tiles_past_tritons_element_limit_are_refused_when_built(blocks, words):
    """Before, both were accepted and failed inside the launch (Triton's "numel (2097152)
    exceeds triton maximum tensor numel (1048576)"); 1024 x 1024 x 16 is the largest."""
    from ditron.kernels.grouped_gemm import GroupedGemmConfig

    bm, bn, bk = blocks
    for config in (GemmConfig, GroupedGemmConfig):
        with pytest.raises(ValueError, match=f"{config.__name__}: {words}; Triton's tiles "
                                             f"hold at most 1048576"):
            config(block_m=bm, block_n=bn, block_k=bk, num_warps=1, num_stages=1)
    GemmConfig(block_m=1024, block_n=1024, block_k=16, num_warps=1, num_stages=1)
