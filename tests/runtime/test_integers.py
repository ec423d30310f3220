"""Integer arguments are taken one way everywhere (``runtime/integers.py``): a Python int
or a NumPy integer (stored as a plain int), never a bool, a float or a tensor, with an
error naming the argument before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ditron
from ditron.engines.copy_engine import CopyEngine
from ditron.kernels.gemm import GemmConfig
from ditron.runtime.integers import as_int, check_int


@pytest.mark.parametrize("value, expected", [
    (3, 3), (np.int64(3), 3), (np.uint8(7), 7), (-2, -2),
    (True, None), (np.True_, None), (3.0, None), (np.float64(3), None),
    (torch.tensor(3), None), ("3", None), (None, None)])
def test_as_int(value, expected):
    got = as_int(value)
    assert got == expected and (got is None or type(got) is int)


def test_check_int_messages():
    assert check_int(np.int32(5), "n", 1) == 5
    with pytest.raises(ValueError, match=r"^n must be a positive int, got 0$"):
        check_int(0, "n", 1)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0, got True$"):
        check_int(True, "n")
    with pytest.raises(TypeError, match=r"^n must be an int in \[2, 4\), got 4$"):
        check_int(4, "n", 2, 4, error=TypeError)


def test_host_objects_take_numpy_ints_and_refuse_bools():
    cfg = GemmConfig(block_m=np.int64(64), num_warps=np.int32(4))
    assert type(cfg.block_m) is int and type(cfg.num_warps) is int
    assert cfg == GemmConfig(block_m=64, num_warps=4)  # one compile-cache key, not two
    with pytest.raises(ValueError, match="GemmConfig: num_stages must be an int >= 1, got True"):
        GemmConfig(num_stages=True)
    with pytest.raises(ValueError, match="copy_engine: lanes must be a positive int, got True"):
        CopyEngine(lanes=True)
    with pytest.raises(ValueError, match="ditron.launch: world_size must be a positive int, "
                                         "got True"):
        ditron.launch(len, True)  # was one rank


def _rank_case() -> list[str]:
    w = ditron.world()
    other = np.int64((w.rank + 1) % w.world_size)
    buf = ditron.zeros(np.int64(4), torch.float32)
    assert buf.shape == (4,) and ditron.peer(buf, other).shape == (4,)
    assert ditron.signal_pad("test.integers", np.int16(3)).signals.numel() >= 3
    layer = ditron.nn.ColumnParallelLinear(np.int64(8), np.int64(4 * w.world_size))
    assert type(layer.in_features) is int and type(layer.out_features) is int
    refused = []
    a = torch.randn(2, 8)
    for name, call in [
            ("peer rank", lambda: ditron.peer(buf, True)),
            ("shape", lambda: ditron.zeros((True, 2), torch.float32)),
            ("ag_gemm chunk_rows", lambda: ditron.ops.ag_gemm(a, torch.randn(8, 4),
                                                              chunk_rows=True)),
            ("gemm_rs chunk_rows", lambda: ditron.ops.gemm_rs(
                torch.randn(2 * w.world_size, 8), torch.randn(8, 4), chunk_rows=(True, 1))),
            ("moe_dispatch max_tokens", lambda: ditron.ops.moe_dispatch(
                torch.randn(1, 8), torch.zeros(1, 1, dtype=torch.int64), w.world_size,
                max_tokens=True)),
            ("ExpertParallelMLP num_experts", lambda: ditron.nn.ExpertParallelMLP(
                8, 4, float(2 * w.world_size))),
            ("RowParallelLinear in_features", lambda: ditron.nn.RowParallelLinear(8.0, 4))]:
        try:
            call()
        except (TypeError, ValueError) as exc:
            refused.append(f"{name}: {exc}")
    return refused


@pytest.mark.parametrize("world_size", [1, 2])
def test_public_calls_take_numpy_ints_and_refuse_bools(world_size):
    for refused in ditron.launch(_rank_case, world_size, backend="cpu"):
        names = [line.split(":")[0] for line in refused]
        assert names == ["peer rank", "shape", "ag_gemm chunk_rows", "gemm_rs chunk_rows",
                         "moe_dispatch max_tokens", "ExpertParallelMLP num_experts",
                         "RowParallelLinear in_features"], refused
        assert refused[0].endswith("got True") and refused[6].endswith("got 8.0"), refused
        assert refused[5].endswith(f"got {float(2 * world_size)}"), refused
